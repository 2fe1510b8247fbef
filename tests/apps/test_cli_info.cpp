// `fluxrt info` smoke tests: runs the built binary on the tiny models and on bad inputs, and
// checks exit codes, that errors are exactly one "fluxrt: error: ..." line, and the JSON output.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

const fs::path kBinary = fs::path(FLUXRT_BINARY_DIR) / "fluxrt";
const fs::path kModels = fs::path(FLUXRT_TEST_DATA_DIR) / "models";

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class CliInfo : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kBinary)) GTEST_SKIP() << kBinary << " not built (build the fluxrt target)";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    tmp_ = fs::temp_directory_path() / (std::string("fluxrt_cli_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  // Runs `fluxrt <args>` with an empty hub cache, capturing stdout and stderr separately.
  RunResult run(const std::string& args) {
    const fs::path out = tmp_ / "stdout", err = tmp_ / "stderr";
    const std::string cmd = "HF_HUB_CACHE=" + shell_quote((tmp_ / "hub").string()) + " " +
                            shell_quote(kBinary.string()) + " " + args + " >" + shell_quote(out.string()) + " 2>" +
                            shell_quote(err.string());
    const int status = std::system(cmd.c_str());
    RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(out);
    r.err = read_file(err);
    return r;
  }

  // A failure is exactly one line on stderr, nothing on stdout, and a non-zero exit code.
  static void expect_one_line_error(const RunResult& r, const std::string& must_contain) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(r.err.rfind("fluxrt: error: ", 0), 0u) << r.err;
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.back(), '\n');
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find(must_contain), std::string::npos) << r.err;
  }

  fs::path tmp_;
};

}  // namespace

TEST_F(CliInfo, TinyKleinFolder) {
  const RunResult r = run("info " + shell_quote((kModels / "flux2-klein-tiny").string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("variant: flux.2-klein (custom: hidden 128, 1+1 blocks, distilled)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layout:  diffusers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Flux2KleinPipeline"), std::string::npos) << r.out;
  // The pipelines it runs as: text-to-image / references, and inpainting with a mask.
  EXPECT_NE(r.out.find("runs:    Flux2KleinPipeline, Flux2KleinInpaintPipeline"), std::string::npos) << r.out;
  for (const char* component : {"transformer", "text_encoder", "vae", "tokenizer", "scheduler"})
    EXPECT_NE(r.out.find(component), std::string::npos) << component;
  EXPECT_NE(r.out.find("bf16 x29"), std::string::npos) << r.out;   // transformer
  EXPECT_NE(r.out.find("bf16 x398"), std::string::npos) << r.out;  // text encoder
}

// klein-9B-KV: the same tensors as klein; its folder's class names the recipe, which runs alone.
TEST_F(CliInfo, TinyKleinKvFolder) {
  const RunResult r = run("info " + shell_quote((kModels / "flux2-klein-kv-tiny").string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(
      r.out.find("variant: flux.2-klein (custom: hidden 128, 1+1 blocks, reference K/V caching, from the "
                 "model_index.json)"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("runs:    Flux2KleinKVPipeline\n"), std::string::npos) << r.out;
}

// FLUX.1 Fill is told by its transformer's widened input, Kontext (dev's shapes) by its folder's
// model_index.json: each runs as its own diffusers class.
TEST_F(CliInfo, TinyFillAndKontextFoldersNameTheirPipelines) {
  RunResult r = run("info " + shell_quote((kModels / "flux1-fill-tiny").string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("variant: flux.1 fill (custom: hidden 128, 1+1 blocks, guidance)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("runs:    FluxFillPipeline\n"), std::string::npos) << r.out;
  r = run("info " + shell_quote((kModels / "flux1-kontext-tiny").string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("runs:    FluxKontextPipeline\n"), std::string::npos) << r.out;
}

TEST_F(CliInfo, TinyKleinBflFileAsJson) {
  const RunResult r = run("--log-level warn info --json " + shell_quote((kModels / "flux2-klein-tiny-bfl.safetensors").string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["source"], "single-file");
  EXPECT_EQ(j["variant"]["family"], "flux.2");
  EXPECT_EQ(j["variant"]["layout"], "bfl");
  EXPECT_EQ(j["pipelines"], nlohmann::json::array({"Flux2KleinPipeline", "Flux2KleinInpaintPipeline"}));
  EXPECT_EQ(j["variant"]["hidden_size"], 128);
  EXPECT_EQ(j["variant"]["double_blocks"], 1);
  ASSERT_EQ(j["components"].size(), 1u);
  EXPECT_EQ(j["components"][0]["tensors"], 25);
  EXPECT_EQ(j["components"][0]["dtypes"]["bf16"], 25);
}

// A GGUF text encoder (llama.cpp names): its types, and what to do with it.
TEST_F(CliInfo, GgufTextEncoder) {
  const fs::path gguf = kModels / ".." / "gguf" / "qwen3-gqa-q8_0.gguf";
  const RunResult r = run("info " + shell_quote(gguf.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("a qwen3 text encoder, not a transformer (run it with --text-encoder FILE)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("q8_0 x170"), std::string::npos) << r.out;
}

TEST_F(CliInfo, Flux1Models) {
  RunResult r = run("info " + shell_quote((kModels / "flux1-dev-tiny-transformer").string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("flux.1 (custom: hidden 32, 1+1 blocks, guidance)"), std::string::npos) << r.out;
  r = run("info " + shell_quote((kModels / "flux1-schnell-tiny-bfl.safetensors").string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("flux.1 (custom: hidden 32, 1+1 blocks, no guidance)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layout:  bfl"), std::string::npos) << r.out;
}

TEST_F(CliInfo, NonexistentPath) {
  const std::string missing = (tmp_ / "no-such-model").string();
  expect_one_line_error(run("info " + shell_quote(missing)), missing);
}

TEST_F(CliInfo, MissingHubRepo) {
  expect_one_line_error(run("info black-forest-labs/FLUX.2-klein-4B"), "models--black-forest-labs--FLUX.2-klein-4B");
}

TEST_F(CliInfo, FolderThatIsNotAModel) {
  std::ofstream(tmp_ / "readme.txt") << "not a model\n";
  expect_one_line_error(run("info " + shell_quote(tmp_.string())), "not a model folder");
}

TEST_F(CliInfo, CorruptFile) {
  const fs::path file = tmp_ / "corrupt.safetensors";
  std::ofstream(file, std::ios::binary) << std::string("\x10\0\0\0\0\0\0\0{\"a\":\n", 13);
  expect_one_line_error(run("info " + shell_quote(file.string())), "corrupt.safetensors");
}

// Every file of the malformed-safetensors corpus (tests/data/safetensors/bad, kept by the io
// tests) must give one error line, including names with newlines in them.
TEST_F(CliInfo, BadSafetensorsCorpus) {
  const fs::path bad = fs::path(FLUXRT_TEST_DATA_DIR) / "safetensors" / "bad";
  if (!fs::is_directory(bad)) GTEST_SKIP() << bad << " not present";
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(bad)) {
    if (entry.path().extension() != ".safetensors") continue;
    SCOPED_TRACE(entry.path().filename().string());
    expect_one_line_error(run("info " + shell_quote(entry.path().string())), entry.path().filename().string());
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST_F(CliInfo, UsageAndVersion) {
  RunResult r = run("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("fluxrt ", 0), 0u) << r.out;
  r = run("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("info"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--threads"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--log-level"), std::string::npos) << r.out;
  r = run("info");  // the model argument is required
  EXPECT_NE(r.exit_code, 0);
}

TEST_F(CliInfo, UsageErrorsAreOneLineWithExitCode2) {
  RunResult r = run("");
  expect_one_line_error(r, "subcommand is required");
  EXPECT_EQ(r.exit_code, 2);
  r = run("bench teleporter");
  expect_one_line_error(r, "teleporter");
  EXPECT_EQ(r.exit_code, 2);
  r = run("--threads many info x");
  expect_one_line_error(r, "--threads");
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(CliInfo, BenchRejectsImpossibleSizesBeforeAnyWork) {
  RunResult r = run("bench transformer --size 100x100");
  expect_one_line_error(r, "multiples of 16");
  EXPECT_EQ(r.exit_code, 1);
  r = run("bench vae --size 512by512");
  expect_one_line_error(r, "expected WxH");
  r = run("bench vae --steps 0");
  expect_one_line_error(r, "at least 1");
  r = run("bench text-encoder --device tpu");
  expect_one_line_error(r, "invalid device");
}

TEST_F(CliInfo, VersionAndHelp) {
  RunResult r = run("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("fluxrt ", 0), 0u) << r.out;
  r = run("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* cmd : {"info", "bench"}) EXPECT_NE(r.out.find(cmd), std::string::npos) << r.out;
}

// A LoRA file: its key scheme, family, rank, alpha, layers and SHA-256 (the one dump_lora.py
// recorded with hashlib), as text and as JSON; a refused LoRA is one error line.
TEST_F(CliInfo, LoraFile) {
  const fs::path lora = fs::path(FLUXRT_TEST_DATA_DIR) / "lora";
  const nlohmann::json manifest = nlohmann::json::parse(read_file(lora / "manifest.json"));
  const RunResult r = run("info " + shell_quote((lora / "klein" / "kohya.safetensors").string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("format:  kohya"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("family:  FLUX.2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank:    4, 12"), std::string::npos)
      << r.out;  // the fused qkv modules are rank 3 x 4
  EXPECT_NE(r.out.find("double_blocks.N.img_attn.qkv  (1 blocks)"), std::string::npos) << r.out;
  const std::string sha = manifest["families"]["klein"]["formats"]["kohya"]["sha256"];
  EXPECT_NE(r.out.find(sha), std::string::npos) << r.out;

  // CLIP-L modules (a FLUX.1 LoRA's text-encoder part) are grouped over the layer index.
  const RunResult te = run(
      "info " +
      shell_quote((fs::path(FLUXRT_TEST_DATA_DIR) / "lora_text_encoder" / "kohya_te.safetensors").string()));
  ASSERT_EQ(te.exit_code, 0) << te.err;
  EXPECT_NE(te.out.find("family:  FLUX.1"), std::string::npos) << te.out;
  EXPECT_NE(te.out.find("text_encoder.encoder.layers.N.mlp.fc1  (2 layers)"), std::string::npos) << te.out;
  EXPECT_NE(te.out.find("modules: 12 (6 layer kinds)"), std::string::npos) << te.out;

  const RunResult j = run("info --json " + shell_quote((lora / "flux1" / "xlabs.safetensors").string()));
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out)["lora"];
  EXPECT_EQ(doc["format"], "XLabs");
  EXPECT_EQ(doc["family"], "FLUX.1");  // XLabs' single-block qkv exists only in FLUX.1
  EXPECT_TRUE(doc["alphas"].empty());
  EXPECT_EQ(doc["sha256"], manifest["families"]["flux1"]["formats"]["xlabs"]["sha256"]);

  const fs::path lokr = tmp_ / "lokr.safetensors";
  {
    // A minimal safetensors file holding one LoKr tensor, without its other half.
    const std::string header =
        R"({"double_blocks.0.img_attn.qkv.lokr_w1":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    std::ofstream out(lokr, std::ios::binary);
    const uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header;
    out.write("\0\0\0\0", 4);
  }
  expect_one_line_error(run("info " + shell_quote(lokr.string())), "lokr_w2");

  // A file mixing LoRA, LoKr, LoHa and DoRA modules (tools/reference/dump_lycoris.py): the kinds.
  const fs::path mixed =
      fs::path(FLUXRT_TEST_DATA_DIR) / "lora_lycoris" / "klein" / "kohya_mixed.safetensors";
  const RunResult k = run("info --json " + shell_quote(mixed.string()));
  ASSERT_EQ(k.exit_code, 0) << k.err;
  const nlohmann::json kinds = nlohmann::json::parse(k.out)["lora"]["kinds"];
  EXPECT_EQ(kinds, nlohmann::json::parse(R"({"lora": 7, "lokr": 10, "loha": 2, "dora": 6})")) << k.out;
  const RunResult kt = run("info " + shell_quote(mixed.string()));
  EXPECT_NE(kt.out.find("kind:    dora 6, loha 2, lokr 10, lora 7 (modules)"), std::string::npos) << kt.out;
}
