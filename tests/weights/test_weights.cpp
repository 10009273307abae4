// The weight-file layer against checkpoints written by the gguf and safetensors Python packages
// (make_fixtures.py): metadata, shapes, every tensor loaded to f32/f16/bf16 and compared with
// the packages' dequantized values, and the errors for damaged or unsupported files.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "weights/fixture_values.h"
#include "weights/checkpoint.h"
#include "weights/gguf.h"
#include "weights/load.h"
#include "weights/mapped_file.h"
#include "weights/safetensors.h"

namespace lw::test {
namespace {

namespace fs = std::filesystem;
using namespace lw::weights;

const std::string kDir = LW_WEIGHTS_FIXTURES;

std::string fixture(const std::string& rel) { return kDir + "/" + rel; }

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

// A scratch copy of a fixture, edited by `edit`.
std::string patched(const std::string& rel, const std::string& name, const std::function<void(std::vector<char>&)>& edit) {
  std::vector<char> bytes = read_bytes(fixture(rel));
  edit(bytes);
  fs::create_directories(fixture("scratch"));
  const std::string path = fixture("scratch/" + name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

nlohmann::json manifest() {
  std::ifstream f(fixture("manifest.json"));
  EXPECT_TRUE(f.good()) << "run the weights.make_fixtures test first (ctest -L weights)";
  return nlohmann::json::parse(f);
}

template <class T>
std::vector<T> read_raw(const std::string& rel) {
  return read_values<T>(fixture(rel));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "missing \"" << (part) << "\" in: " << (msg)

void check_checkpoint(const std::string& key, const nlohmann::json& tensors) {
  SCOPED_TRACE(key);
  std::unique_ptr<Checkpoint> ckpt = open_checkpoint(fixture(key));
  EXPECT_EQ(ckpt->names().size(), tensors.size());
  for (const auto& [name, info] : tensors.items()) {
    SCOPED_TRACE(name);
    const TensorRecord& rec = ckpt->get(name);
    EXPECT_EQ(rec.shape, info["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(rec.type_name, info["type"].get<std::string>());
    if (info["expected"].is_null()) {
      EXPECT_EQ(rec.dtype, FileDType::unsupported);
      const std::string msg = error_of([&] { load_tensor(ctx(), rec, DType::f32); });
      EXPECT_HAS(msg, "tensor '" + name + "'");
      EXPECT_HAS(msg, info["type"].get<std::string>());
      EXPECT_HAS(msg, "supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K");
      continue;
    }
    const std::string exp = info["expected"].get<std::string>();
    if (exp.ends_with(".i64")) {
      const std::vector<int64_t> want = read_raw<int64_t>(exp);
      Tensor t = ctx().to_host(load_tensor(ctx(), rec, DType::bf16));
      ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
      EXPECT_EQ(t.shape(), rec.shape);
      for (int64_t i = 0; i < t.numel(); ++i) {
        int64_t got = 0;
        switch (t.dtype()) {
          case DType::i8: got = t.data<int8_t>()[i]; break;
          case DType::i32: got = t.data<int32_t>()[i]; break;
          case DType::i64: got = t.data<int64_t>()[i]; break;
          default: FAIL() << "integer tensor loaded as " << dtype_name(t.dtype());
        }
        ASSERT_EQ(got, want[i]) << "element " << i;
      }
      continue;
    }
    const std::vector<float> want = read_raw<float>(exp);
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      SCOPED_TRACE(dtype_name(dt));
      Tensor d = load_tensor(ctx(), rec, dt);
      EXPECT_EQ(d.device(), Device::gpu);
      EXPECT_TRUE(d.is_contiguous());
      Tensor t = ctx().to_host(d);
      ASSERT_EQ(t.dtype(), dt);
      EXPECT_EQ(t.shape(), rec.shape);
      ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
      std::vector<double> ref(want.size());
      for (size_t i = 0; i < want.size(); ++i) ref[i] = rounded_to(want[i], dt);
      // f32 and dequantized values are exact; f16/bf16 are the one correctly rounded value.
      EXPECT_TRUE(all_close(t, ref, 0, 0));
    }
  }
}

TEST(Weights, GgufLoadsEveryTensorOfEveryType) {
  const auto m = manifest();
  check_checkpoint("model.gguf", m["model.gguf"]);
}

TEST(Weights, GgufHonoursCustomAlignment) {
  const auto m = manifest();
  GgufFile g = GgufFile::open(fixture("aligned64.gguf"));
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.data_offset() % 64, 0u);
  check_checkpoint("aligned64.gguf", m["aligned64.gguf"]);
}

TEST(Weights, SafetensorsSingleAndSharded) {
  const auto m = manifest();
  check_checkpoint("st_single", m["st_single"]);
  check_checkpoint("st_sharded", m["st_sharded"]);
  // A .safetensors path opens the file itself.
  auto one = open_checkpoint(fixture("st_single/model.safetensors"));
  EXPECT_EQ(one->get("f32.r2").shape, (std::vector<int64_t>{3, 5}));
  auto sharded = open_checkpoint(fixture("st_sharded"));
  EXPECT_HAS(sharded->description(), "2 shards");
  EXPECT_HAS(sharded->get("c.weight").file, "model-00002-of-00002.safetensors");
}

TEST(Weights, GgufMetadataOfEveryType) {
  GgufFile g = GgufFile::open(fixture("model.gguf"));
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_u32("test.u8"), 200u);
  EXPECT_EQ(g.get_i64("test.i8"), -100);
  EXPECT_EQ(g.get_u32("test.u16"), 60000u);
  EXPECT_EQ(g.get_i64("test.i16"), -30000);
  EXPECT_EQ(g.get_u32("test.u32"), 4000000000u);
  EXPECT_EQ(g.get_i64("test.i32"), -2000000000);
  EXPECT_EQ(g.get_f32("test.f32"), 0.15625f);
  EXPECT_TRUE(g.get_bool("test.bool"));
  EXPECT_EQ(g.get_string("test.string"), "h\xc3\xa9llo w\xc3\xb6rld");
  EXPECT_EQ(std::get<uint64_t>(g.value("test.u64").value), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(g.get_i64("test.i64"), -(int64_t{1} << 62) - 3);
  EXPECT_EQ(std::get<double>(g.value("test.f64").value), 2.718281828459045);
  EXPECT_EQ(g.get_f32("test.f64"), 2.718281828459045f);
  EXPECT_EQ(g.get_string_array("test.str_array"), (std::vector<std::string>{"a", "", "tok\xc3\xa9n", "<|end|>"}));
  EXPECT_EQ(g.get_i32_array("test.i32_array"), (std::vector<int32_t>{1, -2, 2147483647, -2147483647 - 1}));
  EXPECT_EQ(g.get_i32_array("test.u8_array"), (std::vector<int32_t>{0, 7, 255}));
  EXPECT_EQ(g.get_f32_array("test.f32_array"), (std::vector<float>{0.5f, -1.25f, 3.0f}));
  EXPECT_EQ(g.get_u32("llama.context_length"), 2048u);
  const GgufValue& nested = g.value("test.nested");
  EXPECT_EQ(nested.type_string(), "array[array[int32]]");
  const auto& rows = std::get<std::vector<GgufValue>>(nested.value);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(std::get<std::vector<GgufValue>>(rows[1].value).size(), 3u);
  EXPECT_EQ(std::get<int64_t>(std::get<std::vector<GgufValue>>(rows[1].value)[2].value), 5);
  EXPECT_TRUE(g.has("test.bool"));
  EXPECT_FALSE(g.has("test.nope"));
  EXPECT_EQ(g.keys().front(), "general.architecture") << "keys keep file order";

  std::string msg = error_of([&] { g.get_u32("test.string"); });
  EXPECT_HAS(msg, "'test.string'");
  EXPECT_HAS(msg, "is string, expected uint32");
  EXPECT_HAS(msg, fixture("model.gguf"));
  msg = error_of([&] { g.get_string_array("test.i32_array"); });
  EXPECT_HAS(msg, "is array[int32], expected array[string]");
  msg = error_of([&] { g.get_f32("test.nope"); });
  EXPECT_HAS(msg, "'test.nope' not found");
  msg = error_of([&] { g.get_i64("test.u64"); });
  EXPECT_HAS(msg, "outside the range of int64");
  msg = error_of([&] { g.get_u32("test.i8"); });
  EXPECT_HAS(msg, "outside the range of uint32");
}

TEST(Weights, GgufShapesAreOutermostFirst) {
  GgufFile g = GgufFile::open(fixture("model.gguf"));
  EXPECT_EQ(g.get("token_embd.weight").shape, (std::vector<int64_t>{7, 64}));
  EXPECT_EQ(g.get("token_embd.weight").dtype, FileDType::q8_0);
  EXPECT_EQ(g.get("q4_0.r3").shape, (std::vector<int64_t>{3, 3, 32}));
  EXPECT_EQ(g.get("q4_0.r3").bytes, 9u * 18u);
  EXPECT_EQ(g.ggml_type("blk.0.ffn_down.weight"), 20u);  // IQ4_NL
  EXPECT_EQ(g.ggml_type("q4_k.r2"), 12u);
  EXPECT_EQ(g.names().back(), "blk.0.attn_q.weight");
}

TEST(Weights, TruncatedFilesNameTheTensorAndTheSize) {
  const std::string path = patched("model.gguf", "truncated.gguf", [](std::vector<char>& b) { b.resize(b.size() - 40); });
  const size_t size = fs::file_size(path);
  std::string msg = error_of([&] { GgufFile::open(path); });
  EXPECT_HAS(msg, "file truncated: tensor 'blk.0.attn_q.weight' needs bytes [");
  EXPECT_HAS(msg, "but '" + path + "' has " + std::to_string(size) + " bytes");

  const std::string head = patched("model.gguf", "header.gguf", [](std::vector<char>& b) { b.resize(100); });
  msg = error_of([&] { GgufFile::open(head); });
  EXPECT_HAS(msg, "file truncated: metadata");
  EXPECT_HAS(msg, head);

  const std::string st = patched("st_single/model.safetensors", "truncated.safetensors",
                                 [](std::vector<char>& b) { b.resize(b.size() - 5); });
  msg = error_of([&] { open_checkpoint(st); });
  EXPECT_HAS(msg, "file truncated: tensor '");
  EXPECT_HAS(msg, st);
}

TEST(Weights, BadMagicAndVersions) {
  std::string path = patched("model.gguf", "magic.gguf", [](std::vector<char>& b) { b[0] = 'X'; });
  std::string msg = error_of([&] { open_checkpoint(path); });
  EXPECT_HAS(msg, "is not a GGUF file: bad magic");
  EXPECT_HAS(msg, path);
  for (char v : {1, 4}) {
    path = patched("model.gguf", "version.gguf", [&](std::vector<char>& b) { b[4] = v; });
    msg = error_of([&] { GgufFile::open(path); });
    EXPECT_HAS(msg, "is GGUF version " + std::to_string(v) + "; supported versions are 2 and 3");
  }
  path = patched("model.gguf", "v2.gguf", [](std::vector<char>& b) { b[4] = 2; });
  GgufFile v2 = GgufFile::open(path);
  EXPECT_EQ(v2.version(), 2u);
  EXPECT_EQ(v2.names().size(), GgufFile::open(fixture("model.gguf")).names().size());
}

TEST(Weights, MissingTensorsAndShards) {
  auto g = open_checkpoint(fixture("model.gguf"));
  EXPECT_EQ(g->find("nope"), nullptr);
  std::string msg = error_of([&] { g->get("blk.9.nope"); });
  EXPECT_HAS(msg, "tensor 'blk.9.nope' not found in GGUF v3 '" + fixture("model.gguf") + "'");
  auto st = open_checkpoint(fixture("st_sharded"));
  msg = error_of([&] { st->get("e.weight"); });
  EXPECT_HAS(msg, "tensor 'e.weight' not found in safetensors '" + fixture("st_sharded") + "'");

  msg = error_of([&] { open_checkpoint(fixture("st_missing_shard")); });
  EXPECT_HAS(msg, "shard 'model-00002-of-00002.safetensors'");
  EXPECT_HAS(msg, "is missing");
}

TEST(Weights, UnsupportedTypesAreListedButNotLoaded) {
  auto g = open_checkpoint(fixture("model.gguf"));
  const TensorRecord& k = g->get("blk.0.ffn_down.weight");
  EXPECT_EQ(k.dtype, FileDType::unsupported);
  EXPECT_EQ(k.type_name, "IQ4_NL");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{3, 64}));
  std::string msg = error_of([&] { load_tensor(ctx(), k, DType::f16); });
  EXPECT_HAS(msg, "tensor 'blk.0.ffn_down.weight'");
  EXPECT_HAS(msg, "has type IQ4_NL, which cannot be loaded; supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                  "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, I8, I32, I64");

  auto st = open_checkpoint(fixture("st_single"));
  msg = error_of([&] { load_tensor(ctx(), st->get("f64.r1"), DType::f32); });
  EXPECT_HAS(msg, "tensor 'f64.r1'");
  EXPECT_HAS(msg, "has type F64, which cannot be loaded");

  msg = error_of([&] { load_tensor(ctx(), g->get("f32.r1"), DType::i32); });
  EXPECT_HAS(msg, "must be f32, f16 or bf16");
}

TEST(Weights, FileErrorsNameThePath) {
  std::string msg = error_of([&] { MappedFile f(fixture("nope.gguf")); });
  EXPECT_HAS(msg, "cannot open '" + fixture("nope.gguf") + "': No such file or directory");
  msg = error_of([&] { MappedFile f(kDir); });
  EXPECT_HAS(msg, "'" + kDir + "' is not a regular file");
  const std::string empty = patched("model.gguf", "empty.gguf", [](std::vector<char>& b) { b.clear(); });
  msg = error_of([&] { open_checkpoint(empty); });
  EXPECT_HAS(msg, "'" + empty + "' is empty");
  msg = error_of([&] { open_checkpoint(fixture("manifest.json")); });
  EXPECT_HAS(msg, "cannot tell the format of checkpoint");
  msg = error_of([&] { open_checkpoint(fixture("exp")); });
  EXPECT_HAS(msg, "holds neither model.safetensors nor model.safetensors.index.json");
  msg = error_of([&] { open_checkpoint(fixture("nope")); });
  EXPECT_HAS(msg, "does not exist");
}

TEST(Weights, SmolLM2Q4_1) {
  const std::string path = LW_SMOLLM2_GGUF;
  if (!fs::exists(path)) GTEST_SKIP() << path << " is not present";
  GgufFile g = GgufFile::open(path);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.names().size(), 272u);
  const TensorRecord& emb = g.get("token_embd.weight");
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(emb.dtype, FileDType::q8_0);
  const TensorRecord& k = g.get("blk.0.attn_k.weight");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{192, 576}));
  EXPECT_EQ(k.dtype, FileDType::q4_1);
  EXPECT_GT(g.get_string_array("tokenizer.ggml.tokens").size(), 49000u);
  // One block of a real tensor, against a host decode of its first block.
  Tensor t = ctx().to_host(load_tensor(ctx(), k, DType::f32));
  const auto* b = reinterpret_cast<const uint8_t*>(k.data);
  // fp16 bits (little-endian in the file) to a half, on the host of every target.
  auto f16 = [](const uint8_t* p) {
    half h;
    std::memcpy(&h, p, sizeof(h));
    return gpu::to_float(h);
  };
  const float d = f16(b), m = f16(b + 2);
  EXPECT_EQ(t.data<float>()[0], d * static_cast<float>(b[4] & 15) + m);
  EXPECT_EQ(t.data<float>()[16], d * static_cast<float>(b[4] >> 4) + m);
}

}  // namespace
}  // namespace lw::test
