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
    let path = common::smollm2_path().unwrap();
    let mut args = vec![
        "generate",
        "-m",
        path.to_str().unwrap(),
        "-p",
        "What is the capital of France?",
        "--max-tokens",
        "48",
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
