//! Conversations that go on (`train-drafter --turns N`): each of a run's own sequences (a user
//! message and the target's answer) continued N - 1 times by a follow-up the target writes itself
//! as the user (Magpie's multi-turn recipe: the conversation so far, then an open user turn) and
//! the target's greedy answer to it. Chat users ask again; a head trained on first turns alone
//! never sees the long shared context of a second one.
//!
//! Each turn is a training sequence of its own: the conversation up to the turn's user message,
//! as the chat template renders it again (as a chat app feeds a conversation back: a thinking
//! model's template drops the reasoning of earlier answers), then the target's answer, trained
//! on from that answer's start. So every counted prediction is of an answer token, as drafting
//! asks; the earlier turns are context (read again in each later turn's sequence). A
//! conversation's turns stay side by side, in order, and the held-out sequences (the last) are
//! whole conversations ([`super::data::held_out_of`]). A conversation stops where the trained length (the
//! context, or the options' `max_len` where shorter) leaves no room for another turn or where
//! every follow-up drawn was empty or repetitive. Each turn says how many went on.

use super::data::{answered, trained_length, SELF_PROMPT_TOKENS};
use super::run::{bar, logged, RunConfig};
use crate::error::{Error, Result};
use crate::model::chat_template::{ChatMessage, Role};
use crate::model::LoadedModel;

/// Most turns a conversation is taken to (`--turns`).
pub const MAX_TURNS: usize = 4;

/// The system prompt that steers the follow-ups the target writes as the user. It only opens
/// the turn the follow-up is written in; the follow-up is answered under the template's own
/// system prompt, as the first turn was.
const FOLLOW_UP_SYSTEM: &str =
    "You are a helpful assistant. Users ask follow-ups: a question, a change, more detail.";

/// Seeds of the follow-ups' draws: the run's seed, plus this, plus the turn.
const FOLLOW_UP_SEED: u64 = 1 << 20;

/// `--turns N` checked: 1 (no follow-ups) to [`MAX_TURNS`].
pub(super) fn check(turns: usize) -> Result<()> {
    if (1..=MAX_TURNS).contains(&turns) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "--turns {turns}: a conversation of 1 to {MAX_TURNS} turns"
    )))
}

/// One of the run's conversations so far: its messages, its turns' training sequences with
/// where each one's answer starts, and whether it may go on.
struct Conversation {
    messages: Vec<ChatMessage>,
    turns: Vec<(Vec<u32>, usize)>,
    going: bool,
}

/// A run's sequences after [`go_on`].
pub(super) struct Continued {
    /// Every turn's token ids, a conversation's turns side by side.
    pub(super) seqs: Vec<Vec<u32>>,
    /// Where each one's answer starts.
    pub(super) answer_from: Vec<usize>,
    /// Each one's turn (1: the first).
    pub(super) turn_of: Vec<usize>,
    /// The follow-ups the target wrote as the user, turn by turn.
    pub(super) follow_ups: Vec<String>,
}

/// The run's sequences (`seqs`, each the templated user message `users[i]` and the target's
/// answer from `answer_from[i]`) taken to `cfg.turns` turns where they can go on.
pub(super) fn go_on(
    cfg: &RunConfig,
    t: &mut LoadedModel,
    users: &[String],
    seqs: Vec<Vec<u32>>,
    answer_from: Vec<usize>,
) -> Result<Continued> {
    if users.len() != seqs.len() {
        return Err(Error::InvalidArgument(format!(
            "{} answers for {} user messages",
            seqs.len(),
            users.len()
        )));
    }
    let mut talks = vec![];
    for ((user, seq), from) in users.iter().zip(seqs).zip(answer_from) {
        let answer = answer_text(t, &seq[from.min(seq.len())..])?;
        talks.push(Conversation {
            messages: vec![
                ChatMessage::new(Role::User, user.clone()),
                ChatMessage::new(Role::Assistant, answer),
            ],
            turns: vec![(seq, from)],
            going: true,
        });
    }
    let mut follow_ups = vec![];
    for turn in 2..=cfg.turns {
        follow_ups.extend(one_more_turn(cfg, t, &mut talks, turn)?);
    }
    let mut out = Continued {
        seqs: vec![],
        answer_from: vec![],
        turn_of: vec![],
        follow_ups,
    };
    for c in talks {
        for (turn, (seq, from)) in c.turns.into_iter().enumerate() {
            out.seqs.push(seq);
            out.answer_from.push(from);
            out.turn_of.push(turn + 1);
        }
    }
    Ok(out)
}

/// Turn `turn` of every conversation of `talks` that can go on: a follow-up written by the
/// target as the user, and its answer; the others stop. The follow-ups' texts, in the order of
/// `talks`.
fn one_more_turn(
    cfg: &RunConfig,
    t: &mut LoadedModel,
    talks: &mut [Conversation],
    turn: usize,
) -> Result<Vec<String>> {
    // Room: what is trained on of a sequence (tokens past it are cut).
    let room = trained_length(cfg, t);
    let stops = t.tokenizer.stop_ids().clone();
    let going_before = talks.iter().filter(|c| c.going).count();
    // The conversations that leave room for a follow-up, each up to its open user turn.
    let mut asked = vec![];
    for (i, c) in talks.iter_mut().enumerate().filter(|(_, c)| c.going) {
        c.going = false;
        let prefix = super::data::open_user_turn(t, FOLLOW_UP_SYSTEM, &c.messages)?;
        if prefix.len() + SELF_PROMPT_TOKENS < room {
            asked.push((i, prefix));
        }
    }
    let b = bar(
        asked.len() as u64,
        &format!("turn {turn}: follow-ups [{{bar:30}}] {{pos}}/{{len}} eta {{eta}}"),
    );
    let started = std::time::Instant::now();
    let prefixes: Vec<Vec<u32>> = asked.iter().map(|(_, p)| p.clone()).collect();
    let written = crate::train::user_turns(
        &mut t.decoder,
        &prefixes,
        SELF_PROMPT_TOKENS,
        &stops,
        cfg.seed
            .wrapping_add(FOLLOW_UP_SEED)
            .wrapping_add(turn as u64),
        |n| logged(&b, "follow-ups", n, started),
    )?;
    b.finish_and_clear();
    // Each follow-up in its conversation as the target reads it; kept where an answer has room.
    let mut going = vec![];
    for ((i, _), content) in asked.iter().zip(written) {
        let Some(content) = content else { continue };
        let text = t.tokenizer.decode(&content)?;
        let mut messages = talks[*i].messages.clone();
        messages.push(ChatMessage::new(Role::User, text.clone()));
        let prompt = t
            .tokenizer
            .encode(&t.template.render(&messages, true)?, true)?;
        if prompt.len() + 1 < room {
            going.push((*i, text, prompt));
        }
    }
    let b = bar(
        going.len() as u64,
        &format!("turn {turn}: answers [{{bar:30}}] {{pos}}/{{len}} eta {{eta}}"),
    );
    let started = std::time::Instant::now();
    let prompts: Vec<Vec<u32>> = going.iter().map(|(_, _, p)| p.clone()).collect();
    let answers = answered(t, &prompts, cfg.answer_tokens, |n| {
        logged(&b, "follow-ups' answers", n, started)
    })?;
    b.finish_and_clear();
    let mut texts = vec![];
    for ((i, text, _), (seq, from)) in going.into_iter().zip(answers) {
        let answer = answer_text(t, &seq[from..])?;
        let c = &mut talks[i];
        c.messages.push(ChatMessage::new(Role::User, text.clone()));
        c.messages.push(ChatMessage::new(Role::Assistant, answer));
        c.turns.push((seq, from));
        c.going = true;
        texts.push(text);
    }
    eprintln!(
        "turn {turn}: {} of {going_before} conversations went on (the others: no room in {room} \
         tokens or no follow-up drawn)",
        texts.len()
    );
    Ok(texts)
}

/// An answer's text as the conversation shows it: its tokens without the stop token that ends
/// it.
fn answer_text(t: &LoadedModel, answer: &[u32]) -> Result<String> {
    let stops = t.tokenizer.stop_ids();
    let end = match answer.last() {
        Some(last) if stops.contains(last) => answer.len() - 1,
        _ => answer.len(),
    };
    t.tokenizer.decode(&answer[..end])
}
