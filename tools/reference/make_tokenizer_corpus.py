#!/usr/bin/env python3
"""Builds the Qwen3 (FLUX.2-klein) tokenizer test corpus checked in under tests/data/tokenizers/.

The reference is the Hugging Face stack of tools/reference/requirements.txt: transformers'
Qwen2Tokenizer loaded from the shared vocab.json + merges.txt + tokenizer_config.json, its own
tokenizer.json re-serialisation loaded back with the `tokenizers` package (both must agree on every
prompt), and diffusers' Flux2KleinPipeline._get_qwen3_prompt_embeds with a stand-in text encoder that
records the input_ids / attention_mask the pipeline hands it.

Outputs (relative to --out, default tests/data/tokenizers):
  qwen3_corpus.json           >= 300 prompts: plain ids, chat-template ids, real-token counts at 512
                              and 256; invalid UTF-8 rows (hex) expected to fail
  qwen3_klein_pipeline.json   full padded input_ids + attention_mask from the diffusers pipeline for
                              a subset of prompts, at max_sequence_length 512 and 256
  qwen3_mini_tokenizer.json   a small tokenizer.json (same pipeline, the first merges only) written
                              by `tokenizers`, merges as pairs
  qwen3_mini_tokenizer_legacy.json  the same with merges as "left right" strings (older format)
  qwen3_mini_expected.json    ids the `tokenizers` package gives with the mini tokenizer
  qwen3_padding_sides.json    padded encodings with padding_side / truncation_side "left"

--tokenizer-json DIR also writes the full (~11 MB) tokenizer.json + tokenizer_config.json there, for
the C++ load-time figure and the optional full-file test (FLUXRT_QWEN_TOKENIZER_JSON).

Deterministic: the random prompts come from a fixed seed. Run:
  /work/refenv/bin/python tools/reference/make_tokenizer_corpus.py
"""

import argparse
import json
import random
import shutil
import tempfile
import types
from pathlib import Path

import tokenizers
import torch
import transformers
from diffusers.pipelines.flux2.pipeline_flux2_klein import Flux2KleinPipeline
from transformers import AutoTokenizer

REPO = Path(__file__).resolve().parents[2]
QWEN_DIR = REPO.parent / "shared" / "data" / "tokenizers" / "qwen3"
PAD_ID = 151643
LENGTHS = (512, 256)
MINI_MERGES = 2000


def template(prompt):
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


# ---- prompts ------------------------------------------------------------------------------------

PLAIN = [
    "a photo of a cat",
    "A cat holding a sign that says hello world",
    "An astronaut riding a horse on the moon, highly detailed, 8k",
    "A watercolor painting of a lighthouse at dusk, soft pastel colors",
    "Portrait of an old fisherman with a white beard, dramatic lighting, 85mm lens",
    "A futuristic city skyline at night with flying cars and neon signs",
    "A bowl of ramen on a wooden table, steam rising, top-down view",
    "Isometric pixel art of a cozy bedroom with a desk, a lamp and a sleeping dog",
    "A red fox sitting in the snow, looking at the camera",
    "Macro shot of a dew drop on a spider web in the morning light",
    "A vintage poster advertising a trip to Mars, retro typography",
    "the quick brown fox jumps over the lazy dog",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "tHe QuIcK bRoWn FoX",
    "A minimalist logo of a mountain and a river, flat vector, two colors",
    "Studio photograph of a pair of sneakers floating in mid-air",
    "A medieval castle on a cliff, stormy sea below, oil painting",
    "A child's crayon drawing of a family in front of a house",
    "Cinematic still of a detective in a rainy alley, film noir",
    "A close-up of hands kneading bread dough on a floured counter",
    "An infographic about the water cycle with arrows and labels",
    "A bookshelf full of colorful books, a cat sleeping on the top shelf",
    "Low-poly 3D render of a desert canyon at sunset",
    "A glass of orange juice with ice cubes, condensation on the glass",
    "Top view of a chessboard in the middle of a game",
    "A hummingbird hovering next to a red flower, shallow depth of field",
    "Graffiti mural on a brick wall showing a giant octopus",
    "A steampunk airship above Victorian London",
    "An elderly couple dancing in the kitchen, warm light",
    "A snowy mountain cabin with smoke from the chimney",
    "Don't show any text. It's a quiet scene; we're alone, you'll see. I'd say they've gone, I'm sure.",
    "DON'T STOP. IT'S FINE. WE'RE HERE. YOU'LL SEE. I'D GO. THEY'VE LEFT. I'M OK.",
    "it'S mixed'Ll cAse'Re contractions'D",
    "rock 'n' roll, the '90s, 'quoted words', ''double''",
    "O'Neil's café isn't open",
    "A sign that reads: \"OPEN 24/7\" — with an em dash – and an en dash",
    "Text in the image: 'Hello, World!' written in chalk",
    "A recipe card: 2 cups flour, 1/2 tsp salt, 3 eggs, 250 ml milk",
    "Price tag showing $19.99 and €17,50 and ¥2000 and £15",
    "A clock showing 10:45 on 2024-03-15",
    "Coordinates 48.8584° N, 2.2945° E",
    "Temperature −5 °C, humidity 85%",
    "version 1.2.3-beta+build.456",
    "Call +1 (555) 123-4567 or email info@example.com",
    "https://example.com/path/to/page?query=1&other=two#section",
    "C:\\Users\\name\\Pictures\\image_001.png",
    "int main() { return 0; } // a C program",
    "def f(x):\n    return x ** 2\n",
    "SELECT * FROM images WHERE width > 1024;",
    "<div class=\"hero\">Hello</div>",
    "Markdown: **bold**, _italic_, `code`, [link](http://x.y)",
    "a\tb\tc\td",
    "line one\nline two\nline three",
    "paragraph one\n\nparagraph two\n\n\nparagraph three",
    "windows\r\nline\r\nendings\r\n",
    "trailing spaces   ",
    "   leading spaces",
    "  both sides  ",
    "multiple    inner     spaces",
    "tabs\t\tand\t \tspaces",
    "ends with newline\n",
    "\nstarts with newline",
    "\n\nstarts with two newlines",
    " starts with space",
    "\tstarts with tab",
]

WHITESPACE = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r", "\r\n", "\t\n", " \n ", "\n \n\n \n\n\n \t \t\t \t\n",
    "\u00a0", "\u00a0\u00a0", "\u3000", "\u2009", "\u200b", "\u2028", "\u2029", "\u0085", "\u000b", "\u000c",
    "\u180e", "\ufeff", "\u202f", "\u205f", "\u1680", "\u2000\u2001\u2002", " \u00a0 ", "\n\u3000\n",
    "a\u00a0b", "a\u3000b", "a\u2009b", "a\u200bb", "a\u2028b", "a\u0085b", "a\u000bb", "a\u000cb",
    "word \u00a0word", "x\u202fy", "x \u3000 y", "x\u180ey", "tail\u00a0", "\u00a0head",
]

DIGITS = [
    "0", "7", "42", "1234567890", "3.14159265358979", "1,000,000", "1e-10", "-273.15", "0x1F",
    "2024", "１２３４", "٠١٢٣٤٥٦٧٨٩", "१२३", "½ ¼ ¾", "x² + y³ = z⁴", "Ⅻ Ⅳ ⅷ", "①②③", "𝟙𝟚𝟛",
    "3rd 21st 100th", "v2.0", "1/2/3/4", "99 bottles", "A4 paper, 300dpi", "ied 4 ½ months",
    "〇一二三", "十万", "ⅰⅱⅲ", "𝟎𝟏", "٣ ٤", "12 34 56", "1 2 3 4 5 6 7 8 9 0",
]

PUNCT = [
    "!", "!!!", "!!!!!!", "?!?!", "...", "…", "---", "—", "***", "###", "~~~", "^_^", ":-)", ";)", "<3",
    "((()))", "[[[]]]", "{{}}", "@@@", "$$$", "%%%", "&&&", "|||", "\\\\", "//", "\"\"\"", "'''", "```",
    "'", "''", "' '", "'s", "'S", "'ll", "'LL", "'re", "'ve", "'m", "'d", "'t", "'x", "’s", "‘quoted’",
    "“smart quotes”", "«guillemets»", "„low quotes“", "¡Hola! ¿Qué tal?", "a.b.c.d", "C++ & C#", "e-mail",
    "--flag=value", "key: value; other: thing", "a , b ; c : d", " !", "  !", " ( ", "\n =", "' era",
    "!!!\n\n", ".\n", "?\r\n", "a!b?c.d", "hello!!!world???", "#hashtag @user $cash", "§ ¶ † ‡ • ‣",
    "→ ← ↑ ↓ ⇒", "± × ÷ ≠ ≤ ≥ ∞", "©®™", "'ſ", "'ſt",
]

CJK = [
    "東京タワー", "一只可爱的猫坐在窗台上", "我想在apple工作1314151天～", "富士山の夕焼け、水彩画風",
    "서울의 밤거리, 네온사인", "漢字とひらがなとカタカナ", "中文，标点。符号！", "「かぎかっこ」と『二重』",
    "ｆｕｌｌｗｉｄｔｈ　ＡＳＣＩＩ", "ﾊﾝｶｸｶﾀｶﾅ", "한국어 텍스트와 English mixed", "日本語 English 中文 한국어",
    "𠀀𠀁𠀂 (CJK Ext B)", "龍が空を飛ぶ", "一二三四五六七八九十", "北京烤鸭，上海小笼包，广州早茶",
    "さくら　さくら　やよいのそらは", "ㄅㄆㄇㄈ", "ㄱㄴㄷㄹ", "々〆〤",
]

SCRIPTS = [
    "нещо на Български", "Привет, мир! Как дела?", "Γειά σου Κόσμε", "שלום עולם", "مرحبا بالعالم",
    "नमस्ते दुनिया", "สวัสดีชาวโลก", "កាន់តែពិសេសអាចខលចេញ", "გამარჯობა", "Բարեւ աշխարհ",
    "Cửa Việt", "Tiếng Việt có dấu: ắ ằ ẳ ẵ ặ", "Ελληνικά: ά έ ή ί ό ύ ώ", "Äpfel Öl Übermut ß ẞ",
    "İstanbul ıi", "Ærø Øresund Åland", "Œuvre ﬁnale ﬂeur", "ǅ ǈ ǋ (titlecase digraphs)",
    "Lorem ipsum dolor sit amet", "ꦲꦏ꧀ꦱꦫ (Javanese)", "ᚠᚢᚦᚨᚱᚲ (runes)", "𓀀𓀁 (hieroglyphs)",
    "ⲁⲃⲅ (Coptic)", "አማርኛ", "ᏣᎳᎩ", "ትግርኛ", "ລາວ", "မြန်မာ", "සිංහල", "தமிழ்", "తెలుగు", "ಕನ್ನಡ",
    "മലയാളം", "বাংলা", "ગુજરાતી", "ਪੰਜਾਬੀ", "ଓଡ଼ିଆ", "ཀ་ཁ་ག", "ᠮᠣᠩᠭᠣᠯ", "ᓀᐦᐃᔭᐍᐏᐣ",
]

EMOJI = [
    "🚀", "🦙", "😀😃😄", "🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "👍🏽", "👩\u200d💻", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇯🇵🇺🇸🇫🇷", "1️⃣ 2️⃣ #️⃣", "❤️ ❤ ♥",
    "🧑🏿\u200d🚀", "a photo of 🐱 with 🎩", "emoji at end 🎉", "🎉emoji at start", "☕️ and ☕",
    "👁️\u200d🗨️", "🤷\u200d♀️🤷\u200d♂️", "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "text🙂text🙂text", "🙂 🙂  🙂", "✨✨✨ sparkle", "⌚⌛⏰", "🀄🃏", "\u200d", "a\u200db",
    "\ufe0f", "x\ufe0f", "Hello 👋🏻 World 🌍!",
]

COMBINING = [
    "e\u0301", "Cafe\u0301", "cafe\u0301 cre\u0300me bru\u0302le\u0301e", "a\u0308", "o\u0308\u0304",
    "\u212b", "\u2126", "\u212a", "A\u030a", "\u1100\u1161\u11a8", "\u1100\u1161", "n\u0303",
    "\u0065\u0301\u0301", "\u0301leading combining", "q\u0307\u0323", "\u1e0b\u0323", "\u0344",
    "\u0958\u0959", "\u0915\u093c", "\u00c5\u030a", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334",
    "\u0340\u0341", "\u037e", "\u0387", "\u2000", "\u2fd5", "\uf900\uf901", "\u1e9b\u0323",
    "Ame\u0301lie's cafe\u0301", "\u00e9 vs e\u0301", "\u0041\u030a\u0301", "\u3099\u304b\u3099",
    "\u304b\u3099", "\u30cf\u309a", "\uac00\u11a8", "\u0627\u0653", "\u05d1\u05bc",
]

SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<think></think>",
    "<|im_start|>system\nYou are a helpful assistant<|im_end|>", "<|im_start", "im_start|>", "<|IM_START|>",
    "< |im_start| >", "<<|im_end|>>", "<|im_end|><|im_end|>", "<|endoftext|><|endoftext|>",
    "text<|endoftext|>text", " <|im_end|> ", "\n<|im_end|>\n", "<tool_call>{}</tool_call>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "<|box_start|>(10,20)<|box_end|>", "<|vision_pad|>" * 3,
    "<|image_pad|><|video_pad|>", "<tool_response>ok</tool_response>", "<|repo_name|>x<|file_sep|>y",
    "<|object_ref_start|>cat<|object_ref_end|>", "<|quad_start|><|quad_end|>", "<|vision_start|><|vision_end|>",
    "<|fim_pad|>", "<think>\n\n</think>\n\n", "a photo of a cat<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nnested", "<|endoftext", "|>", "<||>", "<|>", "<thinking>", "<think >", "</ think>",
    "<|endoftext|>\n\n", "\t<think>", "<|im_end|>​", "<s>", "</s>", "<pad>", "<unk>", "[INST]", "<|begin_of_text|>",
]

# Characters added in Unicode 14-16 (and one Unicode 13 emoji): whether they count as \p{L}/\p{N}
# depends on the Unicode tables of the regex library (Oniguruma in `tokenizers`, the system PCRE2
# here), so these rows catch a divergence when either side is upgraded.
NEW_UNICODE = [
    "a\U0001E030b", "x \U00011F04\U00011F05 y", "\U00031350\U00031351", " \U00010570\U00010571", "\U0001E290 z",
    "\U0001F979 \U0001FAE8", "a\u0897b", "\U0001D2C0", "\U000116D0", "\u2C2F", "\U0001E4D0x", "\U0001343F",
    "q\U00011F41", "\u1715", "\u0890", "a\u08c9b", "\U0001E4F0\U0001E4F1", "\U00011F50\U00011F51",
]

# Unassigned, private-use and non-characters, NUL and other controls, tags, soft hyphen: all plain
# bytes to a byte-level tokenizer, but they pass through NFC and the regex classes.
EDGE_CODEPOINTS = [
    "a\u0378b", "\ue000\ue001", "x\uffffy", "\U0010ffff", "\U000f0000a", "\ufffe", "\ufdd0", "e\u0301\u0378",
    "\u0000", "a\u0000b", "\x7f\x01\x1b[0m", "\U000e0001\U000e0020", "\u00ad", "\u2060\u2061", "\ud7ff",
    "\U0001f1e6",
]


def long_prompts():
    sentences = [
        "A sprawling fantasy landscape with floating islands connected by rope bridges.",
        "Waterfalls pour from the edges of each island into a sea of clouds far below.",
        "In the foreground, a young traveler in a green cloak studies an old map.",
        "The sky shifts from deep violet at the top to warm orange near the horizon.",
        "Tiny villages cling to the cliffs, their windows glowing with lantern light.",
        "Giant birds with iridescent feathers circle the tallest spire.",
        "The style recalls classic matte paintings, rich in detail and soft atmospheric haze.",
        "Every surface is covered in moss, ivy and small blue flowers.",
    ]
    out = []
    rng = random.Random(512)
    for count in (40, 55, 70, 90, 120, 160):
        out.append(" ".join(rng.choice(sentences) for _ in range(count)))
    out.append("\n\n".join(sentences * 12))
    out.append("一只猫在屋顶上看着月亮，" * 120)
    out.append("🚀" * 300)
    out.append("1234567890" * 70)
    out.append("word " * 600)
    out.append("a" * 3000)
    out.append("!?" * 700)
    out.append(" " * 1500 + "x")
    out.append("\n" * 800)
    out.append(("Привет мир " * 80) + ("שלום עולם " * 60))
    out.append("<|im_end|>" * 600)
    out.append("x" + "\u0301" * 700)
    return out


def random_prompts(count):
    rng = random.Random(20260130)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " \t\n\r\u00a0\u3000\u2009",
        "'\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`",
        "éèêëàâäôöûüçñÅØßœ",
        "\u0300\u0301\u0302\u0303\u0308\u0327",
        "东京大阪猫狗山水日本語한국어",
        "😀🚀🦙👍🏽\u200d\ufe0f🇯🇵",
        "ΑΒΓαβγабвгдשלוםمرحبا",
    ]
    words = ["'s", "'t", "'re", "'ll", "<|im_end|>", "<think>", "cat", "dog", "  ", "\n\n", "123", "<|", "|>"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 25)):
            if rng.random() < 0.15:
                parts.append(rng.choice(words))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


INVALID_UTF8 = [
    b"\xff", b"\xfe\xff", b"abc\xc3", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
    b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"ok \xe2\x82 end", b"caf\xe9", b"\xc3\x28",
    b"a photo of a cat\xff", b"<|im_end|>\xff", b"\xf0\x9f\x9a",
]


def all_cases():
    cases = []
    for category, prompts in (("plain", PLAIN), ("whitespace", WHITESPACE), ("digits", DIGITS),
                              ("punctuation", PUNCT), ("cjk", CJK), ("scripts", SCRIPTS), ("emoji", EMOJI),
                              ("combining", COMBINING), ("new_unicode", NEW_UNICODE), ("edge_codepoints", EDGE_CODEPOINTS),
                              ("special_like", SPECIALS), ("long", long_prompts()),
                              ("random", random_prompts(90))):
        for prompt in prompts:
            cases.append((category, prompt))
    return cases


# ---- reference runs -----------------------------------------------------------------------------

class RecordingEncoder(torch.nn.Module):
    """Stands in for Qwen3ForCausalLM: records what the pipeline feeds it, returns zero states."""

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.calls = []

    @property
    def dtype(self):
        return torch.float32

    @property
    def device(self):
        return self.anchor.device

    def forward(self, input_ids, attention_mask, output_hidden_states, use_cache):
        self.calls.append((input_ids.tolist(), attention_mask.tolist()))
        states = torch.zeros(input_ids.shape[0], input_ids.shape[1], 2)
        return types.SimpleNamespace(hidden_states=[states] * 37)


def pipeline_encoding(tok, prompt, length):
    encoder = RecordingEncoder()
    Flux2KleinPipeline._get_qwen3_prompt_embeds(encoder, tok, prompt, max_sequence_length=length)
    (ids,), (mask,) = encoder.calls[0]
    return ids, mask


def make_mini(full_json_path, out_dir, legacy):
    data = json.loads(Path(full_json_path).read_text(encoding="utf-8"))
    model = data["model"]
    vocab = model["vocab"]
    kept_vocab = {tok: vocab[tok] for tok, idx in vocab.items() if idx < 256}
    kept_merges = []
    for left, right in model["merges"]:
        if len(kept_merges) == MINI_MERGES:
            break
        if left in kept_vocab and right in kept_vocab and left + right in vocab:
            kept_merges.append([left, right])
            kept_vocab[left + right] = vocab[left + right]
    # Dense ids, added tokens right after the vocabulary: `tokenizers` renumbers added tokens that
    # would leave a gap after the model's vocabulary, so the mini file must not have one.
    dense = {token: new_id for new_id, token in enumerate(sorted(kept_vocab, key=kept_vocab.get))}
    for offset, added in enumerate(sorted(data["added_tokens"], key=lambda t: t["id"])):
        added["id"] = len(dense) + offset
    model["vocab"] = dense
    model["merges"] = [f"{l} {r}" for l, r in kept_merges] if legacy else kept_merges
    data["truncation"] = None
    data["padding"] = None
    name = "qwen3_mini_tokenizer_legacy.json" if legacy else "qwen3_mini_tokenizer.json"
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    (out_dir / name).write_text(text, encoding="utf-8")
    return out_dir / name


def write_rows(path, header, rows):
    # One case per line: diffs stay readable and the file stays small.
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for key, value in header.items():
            f.write(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},\n")
        f.write(' "cases": [\n')
        for i, row in enumerate(rows):
            sep = "," if i + 1 < len(rows) else ""
            f.write("  " + json.dumps(row, ensure_ascii=False, separators=(",", ":")) + sep + "\n")
        f.write(" ]\n}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "tokenizers")
    parser.add_argument("--tokenizer-json", type=Path, help="also write the full tokenizer.json here")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    tok = AutoTokenizer.from_pretrained(str(QWEN_DIR))
    assert tok.pad_token_id == PAD_ID and tok.padding_side == "right", (tok.pad_token_id, tok.padding_side)
    tmp = Path(tempfile.mkdtemp(prefix="qwen3_tok_"))
    try:
        tok.save_pretrained(str(tmp))
        fast = tokenizers.Tokenizer.from_file(str(tmp / "tokenizer.json"))
        fast.no_truncation()
        fast.no_padding()
        if args.tokenizer_json:
            args.tokenizer_json.mkdir(parents=True, exist_ok=True)
            shutil.copy(tmp / "tokenizer.json", args.tokenizer_json / "tokenizer.json")
            shutil.copy(tmp / "tokenizer_config.json", args.tokenizer_json / "tokenizer_config.json")

        versions = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                    "torch": torch.__version__}
        import diffusers
        versions["diffusers"] = diffusers.__version__

        rows, pipeline_rows, pipeline_picks = [], [], 0
        for index, (category, prompt) in enumerate(all_cases()):
            ids = tok.encode(prompt, add_special_tokens=False)
            assert ids == fast.encode(prompt, add_special_tokens=False).ids, prompt
            rendered = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                               add_generation_prompt=True, enable_thinking=False)
            assert rendered == template(prompt), (prompt, rendered)
            chat_ids = tok(rendered)["input_ids"]
            assert chat_ids == fast.encode(rendered).ids, prompt
            row = {"category": category, "text": prompt, "ids": ids, "chat_ids": chat_ids}
            for length in LENGTHS:
                enc = tok(rendered, padding="max_length", truncation=True, max_length=length)
                real = min(len(chat_ids), length)
                assert enc["input_ids"] == chat_ids[:real] + [PAD_ID] * (length - real), prompt
                assert enc["attention_mask"] == [1] * real + [0] * (length - real), prompt
                row[f"real_tokens_{length}"] = real
            # The diffusers pipeline itself, for every third long prompt and every 20th other one (its
            # padded rows are large; the real_tokens_N checks above cover every row).
            if index % (3 if category == "long" else 20) == 0:
                pipeline_picks += 1
                for length in LENGTHS:
                    p_ids, p_mask = pipeline_encoding(tok, prompt, length)
                    real = row[f"real_tokens_{length}"]
                    assert p_ids == chat_ids[:real] + [PAD_ID] * (length - real), prompt
                    assert p_mask == [1] * real + [0] * (length - real), prompt
                    pipeline_rows.append({"prompt": prompt, "max_sequence_length": length,
                                          "input_ids": p_ids, "attention_mask": p_mask})
            rows.append(row)
        for raw in INVALID_UTF8:
            try:
                raw.decode("utf-8")
                raise AssertionError(f"{raw!r} is valid UTF-8")
            except UnicodeDecodeError:
                pass
            rows.append({"category": "invalid_utf8", "text_hex": raw.hex(), "error": "invalid_utf8"})

        about = ("Qwen3 tokenizer corpus for FLUX.2-klein. 'ids': tokenizer(text) without special tokens; "
                 "'chat_ids': the chat template for one user message (add_generation_prompt=True, "
                 "enable_thinking=False) tokenised, before truncation; 'real_tokens_N': unpadded length after "
                 "tokenizer(padding='max_length', truncation=True, max_length=N), padded on the right with "
                 "pad_id and attention mask 1 for real tokens (checked against that call for every row). "
                 "'text_hex' rows are invalid UTF-8 and must be rejected. Reference: transformers "
                 "Qwen2Tokenizer from shared/data/tokenizers/qwen3 == tokenizers.Tokenizer of its tokenizer.json.")
        header = {"_about": about, "generator": "tools/reference/make_tokenizer_corpus.py", "versions": versions,
                  "pad_id": PAD_ID, "lengths": list(LENGTHS)}
        write_rows(args.out / "qwen3_corpus.json", header, rows)
        write_rows(args.out / "qwen3_klein_pipeline.json",
                   {"_about": "input_ids / attention_mask that diffusers Flux2KleinPipeline._get_qwen3_prompt_embeds "
                              "passes to the text encoder (recorded by a stand-in encoder).",
                    "generator": "tools/reference/make_tokenizer_corpus.py", "versions": versions},
                   pipeline_rows)

        # padding_side / truncation_side "left" (not set by the Qwen3 files; a klein tokenizer_config could).
        side_rows = []
        for padding_side, truncation_side in (("left", "right"), ("right", "left"), ("left", "left")):
            tok.padding_side, tok.truncation_side = padding_side, truncation_side
            for prompt in ("hello there", "", "A cat holding a sign that says hello world"):
                rendered = template(prompt)
                for length in (32, 10):
                    enc = tok(rendered, padding="max_length", truncation=True, max_length=length)
                    side_rows.append({"padding_side": padding_side, "truncation_side": truncation_side,
                                      "prompt": prompt, "max_sequence_length": length,
                                      "input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
        tok.padding_side, tok.truncation_side = "right", "right"
        write_rows(args.out / "qwen3_padding_sides.json",
                   {"_about": "tokenizer(template(prompt), padding='max_length', truncation=True, max_length=N) with "
                              "the tokenizer's padding_side / truncation_side set as given.",
                    "generator": "tools/reference/make_tokenizer_corpus.py", "versions": versions},
                   side_rows)

        # Small tokenizer.json files in both merge formats, with ids from the `tokenizers` package.
        mini_rows = []
        minis = [make_mini(tmp / "tokenizer.json", args.out, legacy) for legacy in (False, True)]
        mini_tok = [tokenizers.Tokenizer.from_file(str(path)) for path in minis]
        for index, (category, prompt) in enumerate(all_cases()):
            if category == "long" and index % 3:
                continue
            ids = mini_tok[0].encode(prompt, add_special_tokens=False).ids
            assert ids == mini_tok[1].encode(prompt, add_special_tokens=False).ids, prompt
            mini_rows.append({"text": prompt, "ids": ids})
        write_rows(args.out / "qwen3_mini_expected.json",
                   {"_about": f"ids from tokenizers.Tokenizer.from_file on qwen3_mini_tokenizer.json and "
                              f"qwen3_mini_tokenizer_legacy.json (same result): the Qwen3 pipeline with only the "
                              f"first {MINI_MERGES} usable merges.",
                    "generator": "tools/reference/make_tokenizer_corpus.py", "versions": versions},
                   mini_rows)
        print(f"{len(rows)} corpus rows ({len(INVALID_UTF8)} invalid UTF-8), "
              f"{pipeline_picks} prompts through the pipeline, {len(mini_rows)} mini rows")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
