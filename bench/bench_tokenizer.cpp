// Qwen3 tokenizer timings (FLUX.2-klein): loading vocab.json + merges.txt, loading a tokenizer.json,
// and encoding ~512-token prompts the way the pipeline does (chat template, pad to 512).
// Usage: bench_tokenizer [QWEN_TOKENIZER_DIR] [--tokenizer-json DIR_WITH_TOKENIZER_JSON] [--iters N]
// The tokenizer.json is not shipped (11 MB); tools/reference/make_tokenizer_corpus.py
// --tokenizer-json DIR writes one. Prints minimum and median times; never asserts.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <time.h>

#include "core/error.h"
#include "core/timer.h"
#include "tokenizers/bpe_tokenizer.h"
#include "tokenizers/qwen_prompt.h"

namespace fs = std::filesystem;
using namespace fluxrt;
using namespace fluxrt::tokenizers;

namespace {

// Wall time, and the thread's CPU time: on a shared machine the CPU time is the better estimate of
// what an idle one would show.
double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

struct Stats {
  double min_ms, median_ms, min_cpu_ms;
};

Stats time_runs(int runs, const std::function<void()>& body) {
  std::vector<double> ms;
  double min_cpu = 1e30;
  for (int i = 0; i < runs; ++i) {
    const double cpu_start = cpu_ms();
    Stopwatch watch;
    body();
    ms.push_back(watch.ms());
    min_cpu = std::min(min_cpu, cpu_ms() - cpu_start);
  }
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2], min_cpu};
}

// Trims `words` from the end until the templated prompt is at most `target` tokens.
std::string prompt_of_length(const QwenPromptEncoder& encoder, const std::vector<std::string>& words, size_t target) {
  std::string text;
  size_t n = 0;
  while (true) {
    std::string longer = text + (text.empty() ? "" : " ") + words[n % words.size()];
    if (encoder.encode_unpadded(longer).size() > target) return text;
    text = std::move(longer);
    ++n;
  }
}

// The first call runs on a freshly loaded tokenizer, so its word cache is empty.
void bench_encode(const char* name, const fs::path& dir, const std::string& prompt, int iters) {
  BpeTokenizer fresh = BpeTokenizer::from_directory(dir);
  QwenPromptEncoder encoder(fresh);
  Stopwatch cold;
  PromptEncoding result = encoder.encode(prompt, kQwenDefaultMaxSequenceLength);
  const double cold_us = cold.ms() * 1e3;
  Stats warm = time_runs(iters, [&] { result = encoder.encode(prompt, kQwenDefaultMaxSequenceLength); });
  const int tokens = result.num_tokens;
  std::printf("encode %-28s %4d tokens  first call %8.1f us   repeated: min %7.1f us  median %7.1f us  (%.1f Mtok/s)\n",
              name, tokens, cold_us, warm.min_ms * 1e3, warm.median_ms * 1e3, tokens / (warm.median_ms * 1e3));
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir = fs::path(__FILE__).parent_path() / ".." / ".." / "shared" / "data" / "tokenizers" / "qwen3";
  fs::path json_dir;
  int iters = 2000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokenizer-json") && i + 1 < argc) {
      json_dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else {
      dir = argv[i];
    }
  }
  try {
    constexpr int kLoadRuns = 7;
    Stats load = time_runs(kLoadRuns, [&] { BpeTokenizer::from_vocab_merges(dir / "vocab.json", dir / "merges.txt", dir / "tokenizer_config.json"); });
    std::printf("load vocab.json + merges.txt + tokenizer_config.json: wall min %.1f ms  median %.1f ms, "
                "cpu min %.1f ms  (%d runs)\n", load.min_ms, load.median_ms, load.min_cpu_ms, kLoadRuns);
    if (!json_dir.empty()) {
      const fs::path file = json_dir / "tokenizer.json";
      Stats json_load = time_runs(kLoadRuns, [&] { BpeTokenizer::from_tokenizer_json(file); });
      std::printf("load tokenizer.json (%.1f MB): wall min %.1f ms  median %.1f ms, cpu min %.1f ms  (%d runs)\n",
                  fs::file_size(file) / 1e6, json_load.min_ms, json_load.median_ms, json_load.min_cpu_ms, kLoadRuns);
    }

    BpeTokenizer tokenizer = BpeTokenizer::from_directory(dir);
    QwenPromptEncoder encoder(tokenizer);
    const std::vector<std::string> english = {
        "A", "sprawling", "fantasy", "landscape", "with", "floating", "islands", "connected", "by", "rope",
        "bridges,", "waterfalls", "pouring", "into", "a", "sea", "of", "clouds;", "in", "the", "foreground",
        "a", "young", "traveler", "in", "a", "green", "cloak", "studies", "an", "old", "map", "(1920s", "style),",
        "lit", "by", "warm", "lantern", "light", "and", "soft", "atmospheric", "haze.", "Highly", "detailed,",
        "8k,", "matte", "painting", "by", "an", "unknown", "artist", "who", "loves", "moss", "and", "ivy."};
    const std::vector<std::string> cjk = {"一只猫在屋顶上看着月亮", "富士山の夕焼け", "서울의", "밤거리",
                                          "水彩画风", "東京タワー", "北京烤鸭", "上海小笼包"};
    const std::vector<std::string> mixed = {"Café", "東京", "🚀", "emoji", "😶‍🌫️", "naïve", "1234", "!!!",
                                            "<think>", "tab\tand", "new\nline", "Привет", "мир"};
    bench_encode("English, 512 templated", dir, prompt_of_length(encoder, english, 512), iters);
    bench_encode("CJK, 512 templated", dir, prompt_of_length(encoder, cjk, 512), iters);
    bench_encode("mixed scripts, 512 templated", dir, prompt_of_length(encoder, mixed, 512), iters);
    bench_encode("English, 77 templated", dir, prompt_of_length(encoder, english, 77), iters);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
