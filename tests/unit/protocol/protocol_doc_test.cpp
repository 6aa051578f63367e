// PROTOCOL.md against the code, for what a client written from the document alone could not
// find before (issue 16): the adam_params fields, the lineage entry, and the limits that
// capabilities does not report. The run config schema, the event endpoint and the service-level
// limits are checked in tests/integration/service/protocol_doc_test.cpp.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "doc_tables.h"
#include "message_samples.h"

namespace spindle::protocol {
namespace {

namespace doc = spindle::testing::doc;
using testing::sample_request;

// A cereal output archive that lists a struct's fields: name, wire type ("f32", "[str]",
// "RevisionInfo") and, for numbers, the value. It does not descend into nested structs.
class FieldLister : public cereal::OutputArchive<FieldLister> {
 public:
  FieldLister() : cereal::OutputArchive<FieldLister>(this) {}
  struct Field {
    std::string name, type;
    double value = 0;
  };
  std::vector<Field> fields;
};

template <class T>
struct IsVector : std::false_type {};
template <class T, class A>
struct IsVector<std::vector<T, A>> : std::true_type {};

template <class T>
std::string wire_type() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, float>) return "f32";
  else if constexpr (std::is_same_v<T, double>) return "f64";
  else if constexpr (std::is_integral_v<T>)
    return std::string(std::is_signed_v<T> ? "i" : "u") + std::to_string(8 * sizeof(T));
  else if constexpr (std::is_same_v<T, std::string>) return "str";
  else if constexpr (IsVector<T>::value) return "[" + wire_type<typename T::value_type>() + "]";
  else if constexpr (std::is_same_v<T, RevisionInfo>) return "RevisionInfo";
  else if constexpr (std::is_same_v<T, TensorRef>) return "TensorRef";
  else return "?";
}

template <class T>
void CEREAL_SAVE_FUNCTION_NAME(FieldLister& ar, const cereal::NameValuePair<T>& nvp) {
  using V = std::decay_t<T>;
  if (std::string_view(nvp.name) == "cereal_class_version") return;
  double value = 0;
  if constexpr (std::is_arithmetic_v<V>) value = double(nvp.value);
  ar.fields.push_back({nvp.name, wire_type<V>(), value});
}

template <class T>
std::vector<FieldLister::Field> fields_of(const T& value) {
  FieldLister ar;
  ar(value);
  return ar.fields;
}

bool accepted(const Request& r) {
  try {
    validate_request(r, Limits{});
    return true;
  } catch (const ProtocolError&) {
    return false;
  }
}

// The fields of `T` as a table after `marker` lists them: same names in the same order (the
// wire order), same types.
template <class T>
void expect_table_lists_fields(const std::string& marker, const T& value, size_t type_column) {
  const auto rows = doc::table_after(doc::protocol_md(), marker);
  const auto fields = fields_of(value);
  ASSERT_EQ(rows.size(), fields.size()) << marker << ": the table and the struct differ";
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_GT(rows[i].size(), type_column);
    EXPECT_EQ(doc::code(rows[i][0]), fields[i].name) << marker << " row " << i;
    EXPECT_EQ(rows[i][type_column], fields[i].type) << marker << " " << fields[i].name;
  }
}

TEST(ProtocolDoc, AdamParamsTableIsTheStructWithItsDefaultsAndBounds) {
  const std::string marker = "**AdamParams**";
  expect_table_lists_fields(marker, AdamParamsMsg{}, 1);
  const auto rows = doc::table_after(doc::protocol_md(), marker);
  const auto fields = fields_of(AdamParamsMsg{});
  ASSERT_EQ(rows.size(), fields.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string& name = fields[i].name;
    const auto value = doc::leading_number(rows[i][2]);
    ASSERT_TRUE(value.has_value()) << name << ": default '" << rows[i][2] << "'";
    EXPECT_EQ(float(*value), float(fields[i].value)) << name << ": documented default";
    const auto probes = doc::bound_probes(rows[i][3], 1e-3);
    ASSERT_TRUE(probes.has_value()) << name << ": bound '" << rows[i][3] << "'";
    for (const doc::Probe& p : *probes) {
      Request r = sample_request(Op::optim_step);
      AdamParamsMsg& a = std::get<OptimStepRequest>(r.body).adam_params;
      float* field[] = {&a.learning_rate, &a.beta1, &a.beta2, &a.eps, &a.weight_decay,
                        &a.grad_clip_norm};
      ASSERT_EQ(std::size(field), fields.size());
      *field[i] = float(p.value);
      EXPECT_EQ(accepted(r), p.accepted) << "adam_params." << name << " = " << p.value;
    }
  }
}

TEST(ProtocolDoc, LineageEntryTableIsTheStruct) {
  expect_table_lists_fields("**LineageEntry**", LineageEntryInfo{}, 1);
  // The reply names it.
  const std::string md = doc::protocol_md();
  EXPECT_NE(md.find("ancestors [LineageEntry], descendants [LineageEntry]"), std::string::npos);
}

// Whether a request of `op`, edited with value `v`, validates.
using Edit = std::function<void(Request&, uint64_t)>;
bool accepts(Op op, const Edit& edit, uint64_t v) {
  Request r = sample_request(op);
  edit(r, v);
  return accepted(r);
}
// The documented bound `v` is the largest accepted value.
void expect_largest_accepted(const std::string& key, Op op, const Edit& edit, uint64_t v) {
  EXPECT_TRUE(accepts(op, edit, v)) << key << " = " << v << " (" << op_name(op) << ")";
  EXPECT_FALSE(accepts(op, edit, v + 1)) << key << " = " << v + 1 << " (" << op_name(op) << ")";
}

bool json_depth_accepted(uint64_t depth) {
  // The root object is level 1; "x" adds depth - 1 arrays.
  const std::string h = R"(J{"protocol_version": 1, "request_id": 1, "token": "", "op": "status",)"
                        R"( "body": {"cereal_class_version": 1}, "x": )" +
                        std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
  try {
    decode_request(std::vector<std::string>{h});
    return true;
  } catch (const ProtocolError&) {
    return false;
  }
}

TEST(ProtocolDoc, LimitsTableHoldsTheLimitsTheCodeEnforces) {
  const auto rows = doc::table_after(doc::protocol_md(), "do not report:");
  ASSERT_FALSE(rows.empty());
  const Limits defaults;
  // Each documented limit, checked against the code. nullptr: checked by the service suite.
  const std::map<std::string, std::function<void(uint64_t)>> checks = {
      {"max_header_bytes", [&](uint64_t v) { EXPECT_EQ(v, defaults.max_header_bytes); }},
      {"max_string_bytes", [&](uint64_t v) { EXPECT_EQ(v, defaults.max_string_bytes); }},
      {"max_reward_test_samples",
       [&](uint64_t v) { EXPECT_EQ(v, defaults.max_reward_test_samples); }},
      {"user_metadata_json",
       [](uint64_t v) {
         expect_largest_accepted("user_metadata_json", Op::create_training, [](Request& r, uint64_t n) {
           std::get<CreateTrainingRequest>(r.body).user_metadata_json = std::string(n, 'x');
         }, v);
       }},
      {"ttl_seconds",
       [](uint64_t v) {
         expect_largest_accepted("ttl_seconds", Op::save_weights, [](Request& r, uint64_t n) {
           std::get<SaveRequest>(r.body).ttl_seconds = int64_t(n);
         }, v);
       }},
      {"limit",
       [](uint64_t v) {
         expect_largest_accepted("limit", Op::catalog_list, [](Request& r, uint64_t n) {
           std::get<CatalogListRequest>(r.body).limit = uint32_t(n);
         }, v);
         expect_largest_accepted("limit", Op::catalog_search, [](Request& r, uint64_t n) {
           std::get<CatalogSearchRequest>(r.body).limit = uint32_t(n);
         }, v);
         expect_largest_accepted("limit", Op::run_list, [](Request& r, uint64_t n) {
           std::get<RunListRequest>(r.body).limit = uint32_t(n);
         }, v);
       }},
      {"bins",
       [](uint64_t v) {
         expect_largest_accepted("bins", Op::reward_test, [](Request& r, uint64_t n) {
           std::get<RewardTestRequest>(r.body).bins = uint32_t(n);
         }, v);
       }},
      {"topk_prompt_logprobs",
       [](uint64_t v) {
         expect_largest_accepted("topk_prompt_logprobs", Op::sample, [](Request& r, uint64_t n) {
           std::get<SampleRequest>(r.body).topk_prompt_logprobs = int32_t(n);
         }, v);
       }},
      {"session_ids",
       [](uint64_t v) {
         expect_largest_accepted("session_ids", Op::heartbeat, [](Request& r, uint64_t n) {
           std::get<HeartbeatRequest>(r.body).session_ids.assign(size_t(n), "s");
         }, v);
       }},
      {"examples",
       [](uint64_t v) {
         expect_largest_accepted("examples", Op::datasets, [](Request& r, uint64_t n) {
           std::get<DatasetsRequest>(r.body).examples = uint32_t(n);
         }, v);
       }},
      {"json_depth",
       [](uint64_t v) {
         EXPECT_TRUE(json_depth_accepted(v));
         EXPECT_FALSE(json_depth_accepted(v + 1));
       }},
      {"subscriptions", nullptr},
  };
  std::set<std::string> documented;
  for (const auto& row : rows) {
    ASSERT_GE(row.size(), 4u);
    const std::string key = doc::code(row[0]);
    documented.insert(key);
    const auto value = doc::leading_number(row[1]);
    ASSERT_TRUE(value.has_value()) << key << ": value '" << row[1] << "'";
    const auto it = checks.find(key);
    ASSERT_NE(it, checks.end()) << key << " is documented but not checked here";
    if (it->second) it->second(uint64_t(*value));
  }
  for (const auto& [key, check] : checks) EXPECT_TRUE(documented.count(key)) << key << " is not documented";
  // capabilities' LimitsInfo reports none of them.
  for (const auto& f : fields_of(LimitsInfo{})) EXPECT_FALSE(documented.count(f.name)) << f.name;
}

TEST(ProtocolDoc, TokenizeTextIsDocumentedAsALongString) {
  const std::string md = doc::protocol_md();
  EXPECT_NE(md.find("text str (a long string: ≤ max_header_bytes"), std::string::npos);
  EXPECT_EQ(md.find("≤ max_tokens_per_request bytes"), std::string::npos);
  const auto rows = doc::table_after(md, "do not report:");
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(doc::code(rows[0][0]), "max_header_bytes");
  EXPECT_NE(rows[0][3].find("`tokenize`'s `text`"), std::string::npos) << rows[0][3];
}

}  // namespace
}  // namespace spindle::protocol
