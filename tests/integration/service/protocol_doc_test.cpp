// PROTOCOL.md against the daemon and the layers under it (issue 16, the gaps a client written
// from the document alone found): the run config schema against rl::parse_run_config, the PUB
// event endpoint and its --pub flag, and the limits' flags and the per-tenant subscription cap.
// The protocol-level tables are checked in tests/unit/protocol/protocol_doc_test.cpp.

#include <nlohmann/json.hpp>

#include <regex>

#include "../../../backend/service/src/events.h"
#include "../../unit/protocol/doc_tables.h"
#include "daemon.h"
#include "spindle/core/error.h"
#include "spindle/rl/config.h"

namespace spindle::testing {
namespace {

using json = nlohmann::json;
using namespace protocol;

// ---- the run config schema --------------------------------------------------------------------

// A config with only what is required.
json minimal_config() {
  return json::parse(
      R"({"policies": [{"name": "p", "reward": {"terms": [{"plugin": "numeric_match"}]}}]})");
}

// `key` ("policies[].dataset.name") of `config`, created when absent.
json& at_key(json& config, const std::string& key) {
  json* node = &config;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.ends_with("[]")) {
      node = &(*node)[part.substr(0, part.size() - 2)][0];
    } else {
      node = &(*node)[part];
    }
    if (dot == std::string::npos) return *node;
    start = dot + 1;
  }
}
const json* find_key(const json& config, const std::string& key) {
  const json* node = &config;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool element = part.ends_with("[]");
    if (element) part.resize(part.size() - 2);
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
    if (element) {
      if (!node->is_array() || node->empty()) return nullptr;
      node = &(*node)[0];
    }
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
}

// parse_run_config's verdict; `error` gets the message of a refusal.
bool parses(const json& config, std::string* error = nullptr) {
  try {
    rl::parse_run_config(config.dump(), "doc-test");
    return true;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    if (error) *error = e.what();
    return false;
  }
}

bool json_has_type(const json& v, const std::string& type) {
  if (type == "u64" || type == "i64" || type == "i32") return v.is_number_integer();
  if (type == "f32") return v.is_number();
  if (type == "str") return v.is_string();
  if (type == "bool") return v.is_boolean();
  if (type == "object") return v.is_object();
  if (type.starts_with("[")) return v.is_array();
  return false;
}

// A value of another JSON type than `type`.
json wrong_type(const std::string& type) {
  if (type == "str" || type.starts_with("[") || type == "object") return 7;
  return "seven";
}

TEST(ProtocolDocRunConfig, EveryKeyItsTypeDefaultAndBoundAreTheParsers) {
  const auto rows = doc::table_after(doc::protocol_md(), "**Run config**");
  ASSERT_GT(rows.size(), 20u);
  const json defaults = json::parse(rl::parse_run_config(minimal_config().dump(), "min").to_json());
  const json full = json::parse(rl::default_arith_config().to_json());
  std::set<std::string> documented;
  for (const auto& row : rows) {
    ASSERT_GE(row.size(), 4u);
    const std::string key = doc::code(row[0]), type = row[1], def = row[2], bound = row[3];
    SCOPED_TRACE(key);
    documented.insert(key);
    // The key is read: a value of the wrong type is refused naming it (unknown keys are refused
    // as "unknown field" instead, which this would catch too).
    if (key != "policies") {
      json c = minimal_config();
      at_key(c, key) = wrong_type(type);
      std::string error;
      EXPECT_FALSE(parses(c, &error));
      std::string leaf = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
      if (leaf.ends_with("[]")) leaf.resize(leaf.size() - 2);
      EXPECT_NE(error.find(leaf), std::string::npos) << error;
      EXPECT_EQ(error.find("unknown field"), std::string::npos) << error;
    }
    // The default: what a config without the key gets (to_json leaves out empty optional
    // strings, lists and -1, so an absent key must be documented with that value).
    const std::string def_json = doc::code(def);
    if (!def_json.empty()) {
      const json documented_default = json::parse(def_json);
      const json* actual = find_key(defaults, key);
      if (actual == nullptr) {
        EXPECT_TRUE(documented_default == "" || documented_default == json::array() ||
                    documented_default == -1 || documented_default == json::object())
            << "to_json omits " << key << " but its documented default is " << def_json;
      } else if (type == "f32") {
        EXPECT_EQ(float(actual->get<double>()), float(documented_default.get<double>())) << def_json;
      } else if (documented_default.is_object()) {
        EXPECT_TRUE(actual->is_object());
      } else {
        EXPECT_EQ(*actual, documented_default) << "documented " << def_json;
      }
      if (actual) EXPECT_TRUE(json_has_type(*actual, type)) << type << ": " << actual->dump();
      // The documented default parses where it is written down explicitly.
      json c = minimal_config();
      at_key(c, key) = documented_default;
      EXPECT_TRUE(parses(c)) << key << " = " << def_json;
    } else {
      EXPECT_TRUE(def.starts_with("required") || key == "policies[].alpha") << def;
    }
    if (const json* v = find_key(full, key)) EXPECT_TRUE(json_has_type(*v, type)) << v->dump();
    // A numeric bound: just inside is accepted, just outside refused.
    const bool integer = type == "u64" || type == "i64" || type == "i32";
    if (const auto probes = doc::bound_probes(bound, integer ? 1.0 : 1e-3)) {
      for (const doc::Probe& p : *probes) {
        json c = minimal_config();
        if (integer) at_key(c, key) = int64_t(p.value);
        else at_key(c, key) = p.value;
        EXPECT_EQ(parses(c), p.accepted) << key << " = " << p.value;
      }
    } else {
      EXPECT_TRUE(bound == "—" || !std::isdigit(static_cast<unsigned char>(bound.back())) ||
                  bound.find("element") != std::string::npos)
          << "a numeric bound the test cannot read: " << bound;
    }
  }
  // Every key the parser writes is documented.
  std::function<void(const json&, const std::string&)> walk = [&](const json& j, const std::string& prefix) {
    for (const auto& [k, v] : j.items()) {
      const std::string key = prefix.empty() ? k : prefix + "." + k;
      if (key.ends_with(".reward")) {
        EXPECT_TRUE(documented.count(key)) << key;
        continue;  // the reward spec is documented with reward_test
      }
      if (v.is_array() && !v.empty() && v[0].is_object()) {
        EXPECT_TRUE(documented.count(key)) << key;
        walk(v[0], key + "[]");
      } else if (v.is_object()) {
        EXPECT_TRUE(documented.count(key)) << key;
        walk(v, key);
      } else {
        EXPECT_TRUE(documented.count(key)) << key << " is written by to_json but not documented";
      }
    }
  };
  json rich = full;
  rich["policies"][0]["dataset"] = {{"name", "jsonl"}, {"path", "x.jsonl"},
                                    {"prompt_template", "{q}"}, {"reference_field", "a"},
                                    {"heldout_size", 5}, {"prompts", {"p"}}};
  walk(json::parse(rl::parse_run_config(rich.dump(), "rich").to_json()), "");
  // Alpha's default is computed: 2 × rank.
  json c = minimal_config();
  c["policies"][0]["rank"] = 5;
  EXPECT_FLOAT_EQ(rl::parse_run_config(c.dump(), "alpha").policies[0].alpha, 10.0f);
}

// ---- the event endpoint -----------------------------------------------------------------------

std::string spindled_help() {
  const std::string cmd = shell_quote((binary_dir() / "app" / "spindled").string()) + " --help";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

TEST(ProtocolDocEvents, PubSocketIsAtTheDocumentedPathAndMovesWithPub) {
  SPINDLE_SHARED_OR_SKIP(model, "models/stories260K/stories260K.bin");
  const std::string md = doc::protocol_md();
  EXPECT_NE(md.find("`ipc://<data_dir>/spindled-events.sock`"), std::string::npos);
  EXPECT_NE(md.find("`spindled --pub ENDPOINT`"), std::string::npos);
  const std::string help = spindled_help();
  EXPECT_TRUE(std::regex_search(help, std::regex("--pub[^\\n]*ipc://<data-dir>/spindled-events\\.sock")))
      << help;

  // The default: a residency event arrives on the documented path once an adapter is placed.
  const fs::path dir = fresh_dir("pubdoc");
  Daemon daemon(dir, {});
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "residency");
  sub.set(zmq::sockopt::linger, 0);
  sub.connect("ipc://" + (dir / "spindled-events.sock").string());
  RawClient c(daemon.ipc(), daemon.token());
  CreateTrainingRequest create;
  create.base_model = "stories260K";
  create.policy = "pubdoc";
  create.rank = 2;
  const auto s = c.ok<TrainingSessionReply>(Op::create_training, create);
  const auto saved = c.ok<SaveReply>(Op::save_weights, SaveRequest{s.session_id, "r", "", 0});
  Frames f;
  const SampleRequest sample = sample_request(saved.address, {1, 2}, f, 2, 0.0f, 0);
  c.ok<SampleReply>(Op::sample, sample, f);
  bool got = false;
  for (int i = 0; i < 100 && !got; ++i) {
    std::vector<zmq::message_t> msgs;
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) <= 0) continue;
    if (!zmq::recv_multipart(sub, std::back_inserter(msgs))) continue;
    ASSERT_EQ(msgs.size(), 2u);
    EXPECT_EQ(msgs[0].to_string(), "residency");
    const Reply event = decode_reply(std::vector<std::string>{msgs[1].to_string()});
    EXPECT_EQ(event.op, Op::status);
    EXPECT_EQ(event.request_id, 0u);
    got = !std::get<StatusReply>(event.body).placements.empty();
  }
  EXPECT_TRUE(got) << "no residency event on " << (dir / "spindled-events.sock");
  EXPECT_EQ(daemon.terminate(), 0);

  // --pub moves it.
  const fs::path other = fresh_dir("pubdoc2");
  const std::string endpoint = "ipc://" + (other / "custom-events.sock").string();
  Daemon moved(other, {"--pub", endpoint});
  EXPECT_TRUE(fs::exists(other / "custom-events.sock"));
  EXPECT_FALSE(fs::exists(other / "spindled-events.sock"));
  EXPECT_NE(moved.log().find("events on " + endpoint), std::string::npos) << moved.log();
  EXPECT_EQ(moved.terminate(), 0);

  // ... but never onto TCP: the firehose has no CURVE and no tenants, so spindled refuses.
  std::string refusal;
  try {
    Daemon tcp(fresh_dir("pubdoc3"), {"--pub", "tcp://127.0.0.1:*"});
    tcp.terminate();
  } catch (const std::exception& e) {
    refusal = e.what();
  }
  EXPECT_NE(refusal.find("--pub tcp://127.0.0.1:*: expected ipc://PATH"), std::string::npos)
      << refusal;
  EXPECT_NE(md.find("`--pub` takes `ipc://PATH` only"), std::string::npos);
}

// ---- the limits' flags and the service-level limits ------------------------------------------

TEST(ProtocolDocLimits, EveryDocumentedFlagExistsAndTheSubscriptionCapIsTheCode) {
  const std::string md = doc::protocol_md();
  const size_t from = md.find("**Limits** reported by");
  const size_t to = md.find("## 7. Versioning");
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  const std::string section = md.substr(from, to - from);
  const std::string help = spindled_help();
  ASSERT_NE(help.find("--max-queue"), std::string::npos) << help;
  std::set<std::string> flags;
  const std::regex flag("`(--[a-z-]+)`|\\((--[a-z-]+)\\)");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), flag);
       it != std::sregex_iterator(); ++it) {
    flags.insert((*it)[1].matched ? (*it)[1].str() : (*it)[2].str());
  }
  EXPECT_GE(flags.size(), 9u);
  for (const std::string& f : flags) EXPECT_NE(help.find(f + " "), std::string::npos) << f;

  const auto rows = doc::table_after(md, "do not report:");
  bool found = false;
  for (const auto& row : rows) {
    if (doc::code(row[0]) != "subscriptions") continue;
    found = true;
    EXPECT_EQ(doc::leading_number(row[1]), double(service::EventHub::kMaxPerTenant));
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace spindle::testing
