//! The real SmolLM2-135M-Instruct (Q4_1 GGUF; `.ci/run` fetches it): tokenizer ids against
//! llama.cpp's, the ChatML template, and a real answer.

mod common;

use std::process::Command;
use treespec::model::chat_template::{ChatMessage, Role};
use treespec::model::{self, LoadOptions};

/// Token ids from llama.cpp's own tokenizer (llama-cpp-python 0.3.x `Llama.tokenize(text,
/// add_bos=False, special=True)`) on the same GGUF file.
const REFERENCE: &[(&str, &[u32])] = &[
    (
        "What is the capital of France?",
        &[1780, 314, 260, 3575, 282, 4649, 47],
    ),
    (
        "Hello, world! 12345 and 3.14159",
        &[
            19556, 28, 905, 17, 216, 33, 34, 35, 36, 37, 284, 216, 35, 30, 33, 36, 33, 37, 41,
        ],
    ),
    (
        "  leading spaces\tand tabs\nnew lines\n\n",
        &[216, 2899, 5600, 197, 397, 29416, 198, 2241, 3204, 1116],
    ),
    (
        "def f(x):\n    return x ** 2  # square",
        &[
            1604, 275, 24, 104, 727, 472, 1003, 1792, 1903, 216, 34, 216, 907, 5222,
        ],
    ),
    (
        "Ünïcödé façade — naïve café, 日本語のテキスト, emoji 🤖🎨",
        &[
            142, 246, 94, 25972, 83, 7466, 84, 2756, 40852, 1841, 15486, 46494, 37366, 28, 17097,
            241, 115, 40993, 179, 120, 248, 26453, 11100, 224, 10391, 251, 10391, 134, 11100, 226,
            28, 649, 33777, 15107, 114, 240, 10813, 232, 118,
        ],
    ),
    (
        "<|im_start|>user\nHi<|im_end|>\n",
        &[1, 4093, 198, 26843, 2, 198],
    ),
    (
        "don't won't it's I'M WE'LL",
        &[
            12420, 982, 3763, 982, 357, 506, 339, 23, 61, 26587, 23, 16421,
        ],
    ),
    (
        "https://example.com/path?q=1&r=two",
        &[
            4687, 1742, 7434, 30, 824, 31, 1537, 47, 97, 45, 33, 22, 98, 45, 11355,
        ],
    ),
];

#[test]
fn tokenizer_matches_llama_cpp() {
    let Some(path) = common::smollm2_path() else {
        return;
    };
    let m = model::load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
    for (text, want) in REFERENCE {
        let got = m.tokenizer.encode(text, false).unwrap();
        assert_eq!(&got, want, "ids of {text:?}");
        if !text.contains("<|") {
            // Decoding for display drops special tokens; everything else round-trips.
            let back = m.tokenizer.decode(&got).unwrap();
            assert_eq!(back, *text, "round trip of {text:?}");
        }
    }
}

#[test]
fn chat_template_renders_chatml() {
    let Some(path) = common::smollm2_path() else {
        return;
    };
    let m = model::load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let msgs = [ChatMessage::new(Role::User, "Hi there")];
    let text = m.template.render(&msgs, true).unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    );
    let msgs = [
        ChatMessage::new(Role::System, "Be brief."),
        ChatMessage::new(Role::User, "Hi"),
        ChatMessage::new(Role::Assistant, "Hello!"),
    ];
    let text = m.template.render(&msgs, false).unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n"
    );
    let ids = m.tokenizer.encode(&text, false).unwrap();
    assert_eq!(ids[0], 1, "<|im_start|> is one special token");
    assert!(m.tokenizer.is_stop(2), "<|im_end|> stops generation");
}

fn generate(extra: &[&str]) -> (String, String) {
    generate_with("What is the capital of France?", "48", extra)
}

/// `treespec generate` on SmolLM2 with `prompt`, at most `max_tokens` new tokens: the answer and
/// the stats line.
fn generate_with(prompt: &str, max_tokens: &str, extra: &[&str]) -> (String, String) {
    let path = common::smollm2_path().unwrap();
    let mut args = vec![
        "generate",
        "-m",
        path.to_str().unwrap(),
        "-p",
        prompt,
        "--max-tokens",
        max_tokens,
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_treespec"))
        .args(&args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).to_string(), stderr)
}

#[test]
fn answers_capital_of_france() {
    if common::smollm2_path().is_none() {
        return;
    }
    // Unquantised weights: the model's own greedy answer.
    let (text, stats) = generate(&["--exact"]);
    assert!(text.contains("Paris"), "answer: {text}");
    assert!(stats.contains("tok/s"), "{stats}");
    // Quantised (Q4_1 re-quantised to Q8_0) with a plain system prompt. With SmolLM2's default
    // system prompt the 135M model's first token is a near-tie ("L" vs "The", 0.08 apart in f32)
    // that quantisation flips into a French answer; candle's own quantized_llama does the same.
    let (text, _) = generate(&["--system", "You are a helpful assistant."]);
    assert!(text.contains("Paris"), "answer: {text}");
}

/// Lossless on quantised weights: with SmolLM2 drafting for itself, `linear` and `tree` emit
/// exactly `ar`'s tokens on a GSM8K prompt whose 11th answer token is a near tie. Before the host
/// ran attention a row and head a thread (`gpu::attention`), candle's matmuls summed a verify
/// pass's scores in another order than a one-token step's, and `tree` took the other branch
/// ("collected by Adam" for "that the class has collected").
#[test]
fn speculative_modes_emit_ar_tokens_through_a_near_tie() {
    let Some(path) = common::smollm2_path() else {
        return;
    };
    let prompt = "Students in class 3B are collecting school points for behavior. If they get enough \
        points in total, they can go on a trip. In the class, there are Adam, Martha, Betty, and \
        Tom. Adam has collected 50 points. Betty was better than Adam and collected 30% more. Marta \
        managed to collect 3 times more points than Tom, who has 30 points less than Betty. How many \
        points is the class missing to go on the trip if the minimum threshold is 400 points?\n\
        Think step by step, then give the final answer on its own line.";
    let drafter = path.to_str().unwrap();
    let (ar, _) = generate_with(prompt, "24", &["--mode", "ar"]);
    assert!(ar.contains("that the class has collected"), "ar: {ar}");
    for mode in ["linear", "tree"] {
        let (text, _) = generate_with(prompt, "24", &["--mode", mode, "--drafter", drafter]);
        assert_eq!(text, ar, "{mode} against ar");
    }
}
