// Safetensors: writer/reader round trip, header layout, and the parser's refusals.

#include "spindle/engine/safetensors.h"

#include "loader_test_util.h"

namespace spindle::loader_test {
namespace {

using engine::parse_safetensors_header;
using engine::SafetensorsFile;
using engine::SafetensorsTensorIn;

engine::SafetensorsHeader parse(const std::string& file_bytes) {
  return parse_safetensors_header(reinterpret_cast<const uint8_t*>(file_bytes.data()),
                                  file_bytes.size(), file_bytes.size(), "test.safetensors");
}

std::vector<float> values(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (float(i) - float(n) / 3.0f) / 7.0f;
  return v;
}

TEST(Safetensors, RoundTripAllFloatDtypesAndLayoutLikeHf) {
  TempDir dir("st");
  const auto a = values(12, 1.0f), b = values(6, 100.0f), c = values(5, 0.001f),
             d = values(4, 3.0f);
  const SafetensorsTensorIn in[] = {
      {"b.f16", DType::f16, {2, 3}, b.data()},  {"a.f32", DType::f32, {3, 4}, a.data()},
      {"c.bf16", DType::bf16, {5}, c.data()},   {"d.i32", DType::i32, {2, 2}, d.data()},
      {"e.empty", DType::f32, {0, 7}, nullptr}, {"f.scalar", DType::f32, {}, a.data()},
  };
  const auto path = dir / "t.safetensors";
  engine::write_safetensors(path, in, {{"format", "pt"}, {"note", "x"}});

  const std::string raw = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(raw[size_t(i)]);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(raw[8], '{');
  const std::string header = raw.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));  // padded with spaces
  EXPECT_LT(header.find("\"a.f32\""), header.find("\"b.f16\""));      // keys sorted

  SafetensorsFile f(path);
  ASSERT_EQ(f.entries().size(), 6u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "x");
  EXPECT_EQ(f.find("a.f32")->dtype, "F32");
  EXPECT_EQ(f.find("b.f16")->shape, (Shape{2, 3}));
  // Four-byte tensors come before two-byte ones in the data section.
  EXPECT_LT(f.find("d.i32")->data_begin, f.find("b.f16")->data_begin);
  EXPECT_LT(f.find("a.f32")->data_begin, f.find("c.bf16")->data_begin);

  const Tensor ta = f.read_f32("a.f32");
  EXPECT_EQ(0, std::memcmp(ta.data(), a.data(), 48));
  const Tensor tb = f.read_f32("b.f16");
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(tb.data()[i], f16_to_f32(f32_to_f16(b[i])));
  const Tensor tc = f.read_f32("c.bf16");
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(tc.data()[i], bf16_to_f32(f32_to_bf16(c[i])));
  EXPECT_EQ(f.read_f32("e.empty").shape(), (Shape{0, 7}));
  const Tensor ts = f.read_f32("f.scalar");
  EXPECT_EQ(ts.numel(), 1);
  EXPECT_EQ(ts.data()[0], a[0]);

  int32_t ints[4];
  f.read_raw(*f.find("d.i32"), ints);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ints[i], int32_t(std::nearbyint(d[size_t(i)])));
  auto wrong = catch_error([&] { f.read_f32("d.i32"); });
  EXPECT_EQ(wrong.code, ErrorCode::unsupported);
  EXPECT_TRUE(wrong.has("d.i32") && wrong.has("I32") && wrong.has("t.safetensors"))
      << wrong.message;
  auto missing = catch_error([&] { f.read_f32("nope"); });
  EXPECT_EQ(missing.code, ErrorCode::not_found);
  EXPECT_TRUE(missing.has("nope")) << missing.message;
}

TEST(Safetensors, WriterRefusesBadInput) {
  TempDir dir("st");
  float x[2] = {1, 2};
  const SafetensorsTensorIn dup[] = {{"w", DType::f32, {2}, x}, {"w", DType::f16, {2}, x}};
  EXPECT_SPINDLE_ERROR(engine::write_safetensors(dir / "a", dup), "'w' given twice");
  const SafetensorsTensorIn meta[] = {{"__metadata__", DType::f32, {2}, x}};
  EXPECT_SPINDLE_ERROR(engine::write_safetensors(dir / "b", meta), "reserved");
  const SafetensorsTensorIn null[] = {{"w", DType::f32, {2}, nullptr}};
  EXPECT_SPINDLE_ERROR(engine::write_safetensors(dir / "c", null), "no data");
  float big[1] = {1e10f};
  const SafetensorsTensorIn range[] = {{"w", DType::u8, {1}, big}};
  EXPECT_SPINDLE_ERROR(engine::write_safetensors(dir / "d", range), "'w'", "does not fit");
  EXPECT_FALSE(fs::exists(dir / "d"));
}

struct BadHeader {
  const char* what;
  std::string json;
  size_t data_bytes;
  std::vector<std::string> needles;
};

TEST(Safetensors, ParserRefusesMalformedHeadersNamingTheProblem) {
  const std::string a8 = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::vector<BadHeader> cases = {
      {"corrupt json", "{\"a\":{\"dtype\":", 8, {"not valid JSON"}},
      {"not an object", "[1,2,3]", 8, {"must be a JSON object"}},
      {"entry not object", R"({"a":3})", 8, {"tensor 'a'", "must be an object"}},
      {"missing dtype", R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8, {"'a'", "'dtype'"}},
      {"unknown dtype",
       R"({"a":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}})",
       8,
       {"'a'", "F128"}},
      {"sub-byte dtype", R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 8, {"F4"}},
      {"dtype not string", R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", 8, {"dtype"}},
      {"negative dim",
       R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
       8,
       {"'a'", "shape[0]", "non-negative", "-2"}},
      {"float dim", R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8, {"shape[0]"}},
      {"huge dim",
       R"({"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]}})",
       8,
       {"shape[0]"}},
      {"overflowing number",
       R"({"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,8]}})",
       8,
       {"not valid JSON"}},
      {"numel overflow",
       R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})",
       8,
       {"'a'", "overflow"}},
      {"shape not array", R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8, {"shape"}},
      {"negative offset",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-1,7]}})",
       8,
       {"'a'", "data_offsets[0]"}},
      {"offsets past data",
       R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
       8,
       {"'a'", "past the data section", "8 bytes"}},
      {"offsets reversed",
       R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})",
       8,
       {"'a'", "end before they begin"}},
      {"size mismatch",
       R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
       8,
       {"'a'", "span 8 bytes", "needs 12"}},
      {"three offsets",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})",
       8,
       {"data_offsets"}},
      {"overlap",
       "{" + a8 + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12,
       {"'a'", "'b'", "overlap"}},
      {"duplicate name", "{" + a8 + "," + a8 + "}", 8, {"duplicate key 'a'"}},
      {"duplicate field",
       R"({"a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})",
       8,
       {"duplicate key 'dtype'"}},
      {"metadata value", "{" + a8 + R"(,"__metadata__":{"k":1}})", 8, {"__metadata__", "'k'"}},
      {"metadata nested", "{" + a8 + R"(,"__metadata__":{"k":{"x":"y"}}})", 8, {"'k'"}},
      {"metadata not object", "{" + a8 + R"(,"__metadata__":"pt"})", 8, {"__metadata__"}},
      {"deep nesting", std::string(100, '[') + std::string(100, ']'), 0, {"deeper"}},
      {"invalid utf-8", "{\"\xff\":1}", 0, {"not valid JSON"}},
      {"empty header", "", 8, {"not valid JSON"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const auto caught = catch_error([&] { parse(safetensors_bytes(c.json, c.data_bytes)); });
    EXPECT_TRUE(caught.thrown) << c.what;
    EXPECT_TRUE(caught.has("test.safetensors")) << caught.message;
    for (const auto& n : c.needles) EXPECT_TRUE(caught.has(n)) << caught.message;
  }
}

TEST(Safetensors, ParserAcceptsEdgeCases) {
  // Zero-size tensors may sit anywhere; holes and trailing bytes are tolerated; padding.
  const auto h = parse(safetensors_bytes(
      R"({"z":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},)"
      R"("a":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},"__metadata__":{}}   )",
      20));
  ASSERT_EQ(h.entries.size(), 2u);
  EXPECT_EQ(h.entries[0].name, "a");
  EXPECT_EQ(h.entries[0].known_dtype, DType::bf16);
  EXPECT_EQ(h.find("z")->byte_size(), 0u);
  EXPECT_EQ(h.find("q"), nullptr);
  const auto f64 =
      parse(safetensors_bytes(R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8));
  EXPECT_FALSE(f64.entries[0].known_dtype.has_value());
  EXPECT_EQ(f64.entries[0].element_size, 8u);
}

TEST(Safetensors, LengthFieldChecks) {
  std::string tiny = "abc";
  EXPECT_SPINDLE_ERROR(parse(tiny), "too short");
  std::string bytes = safetensors_bytes(R"({})", 0);
  bytes[0] = char(200);  // says 200 header bytes, 2 follow
  EXPECT_SPINDLE_ERROR(parse(bytes), "header length field says 200", "truncated");
  // A length over the 100 MiB limit in a (claimed) huge file.
  std::string len(8, '\0');
  const uint64_t n = (uint64_t(100) << 20) + 1;
  for (int i = 0; i < 8; ++i) len[size_t(i)] = char(uint8_t(n >> (8 * i)));
  EXPECT_SPINDLE_ERROR(parse_safetensors_header(reinterpret_cast<const uint8_t*>(len.data()), 8,
                                                uint64_t(1) << 30, "big.safetensors"),
                       "big.safetensors", "limit");
}

TEST(Safetensors, EveryTruncationOfAFileIsAnErrorNamingTheFile) {
  TempDir dir("st");
  const auto a = values(10, 1.0f);
  const SafetensorsTensorIn in[] = {{"x", DType::f32, {2, 3}, a.data()},
                                    {"y", DType::f16, {4}, a.data()}};
  engine::write_safetensors(dir / "full.safetensors", in);
  const std::string full = read_bytes(dir / "full.safetensors");
  ASSERT_NO_THROW(SafetensorsFile(dir / "full.safetensors"));
  const auto cut = dir / "cut.safetensors";
  for (size_t k = 0; k < full.size(); ++k) {
    SCOPED_TRACE(k);
    write_bytes(cut, full.substr(0, k));
    const auto caught = catch_error([&] { SafetensorsFile f(cut); });
    EXPECT_TRUE(caught.thrown);
    EXPECT_TRUE(caught.has("cut.safetensors")) << caught.message;
    const auto direct = catch_error([&] { parse(full.substr(0, k)); });
    EXPECT_TRUE(direct.thrown);
  }
}

}  // namespace
}  // namespace spindle::loader_test
