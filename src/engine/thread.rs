//! The engine on its own thread: commands in, events out. Stopping and settings changes take
//! effect between two steps.

use super::{Engine, Settings, StepEvent, StopReason};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the engine thread is asked to do.
#[derive(Debug, Clone)]
pub enum Command {
    /// Answer this prompt (the whole rendered conversation), at most `max_tokens` new tokens.
    Generate {
        /// Token ids of the rendered conversation.
        prompt: Vec<u32>,
        /// Token limit of the answer.
        max_tokens: usize,
    },
    /// Stop the answer in progress.
    Stop,
    /// Change settings (mode, budget, depth, temperature, ...).
    Settings(Settings),
    /// End the thread.
    Shutdown,
}

/// The prompt of an answer was read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Started {
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Of those, the leading tokens whose rows were kept in the caches (not read again).
    pub cached_tokens: usize,
    /// Time to read the rest.
    pub prefill: Duration,
}

/// An answer ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    /// Why.
    pub reason: StopReason,
    /// Tokens in the answer.
    pub tokens: usize,
    /// Steps taken.
    pub steps: usize,
    /// Time of the steps.
    pub decode: Duration,
}

/// What the engine thread reports.
#[derive(Debug, Clone)]
pub enum Event {
    /// The prompt was read.
    Started(Started),
    /// One step ran.
    Step(StepEvent),
    /// The answer ended.
    Finished(Finished),
    /// New settings are in force.
    SettingsApplied(Settings),
    /// Something failed; the engine is still usable.
    Error(String),
}

/// A running engine thread.
pub struct EngineThread {
    tx: Sender<Command>,
    rx: Receiver<Event>,
    handle: Option<JoinHandle<()>>,
}

impl EngineThread {
    /// Move the engine onto a new thread.
    pub fn spawn(mut engine: Engine) -> Self {
        let (tx, cmd_rx) = channel::<Command>();
        let (ev_tx, rx) = channel::<Event>();
        let handle = std::thread::Builder::new()
            .name("treespec-engine".into())
            .spawn(move || run(&mut engine, cmd_rx, ev_tx))
            .ok();
        EngineThread { tx, rx, handle }
    }

    /// Send a command (ignored if the thread has ended).
    pub fn send(&self, cmd: Command) {
        let _ = self.tx.send(cmd);
    }

    /// The next event, if one is waiting.
    pub fn try_recv(&self) -> Option<Event> {
        self.rx.try_recv().ok()
    }

    /// Wait up to `timeout` for the next event.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Event> {
        self.rx.recv_timeout(timeout).ok()
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Shutdown);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn apply(engine: &mut Engine, s: Settings, out: &Sender<Event>) {
    match engine.set_settings(s) {
        Ok(()) => {
            let _ = out.send(Event::SettingsApplied(*engine.settings()));
        }
        Err(e) => {
            let _ = out.send(Event::Error(e.to_string()));
        }
    }
}

fn run(engine: &mut Engine, rx: Receiver<Command>, out: Sender<Event>) {
    while let Ok(cmd) = rx.recv() {
        match cmd {
            Command::Shutdown => return,
            Command::Stop => {}
            Command::Settings(s) => apply(engine, s, &out),
            Command::Generate { prompt, max_tokens } => {
                let begun = match engine.begin(&prompt) {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = out.send(Event::Error(e.to_string()));
                        continue;
                    }
                };
                let _ = out.send(Event::Started(Started {
                    prompt_tokens: prompt.len(),
                    cached_tokens: begun.cached,
                    prefill: begun.time,
                }));
                let t0 = Instant::now();
                let mut steps = 0;
                let reason = loop {
                    // Commands that arrived during the last step.
                    let mut stop = false;
                    loop {
                        match rx.try_recv() {
                            Ok(Command::Stop) => stop = true,
                            Ok(Command::Settings(s)) => apply(engine, s, &out),
                            Ok(Command::Shutdown) | Err(TryRecvError::Disconnected) => return,
                            Ok(Command::Generate { .. }) => {
                                let _ = out.send(Event::Error(
                                    "an answer is already being generated".into(),
                                ));
                            }
                            Err(TryRecvError::Empty) => break,
                        }
                    }
                    if stop {
                        break StopReason::Cancelled;
                    }
                    let remaining = max_tokens.saturating_sub(engine.answer().len());
                    match engine.step(remaining) {
                        Ok(ev) => {
                            steps += 1;
                            let fin = ev.finished;
                            let _ = out.send(Event::Step(ev));
                            if let Some(r) = fin {
                                break r;
                            }
                        }
                        Err(e) => {
                            let _ = out.send(Event::Error(e.to_string()));
                            break StopReason::Cancelled;
                        }
                    }
                };
                let _ = out.send(Event::Finished(Finished {
                    reason,
                    tokens: engine.answer().len(),
                    steps,
                    decode: t0.elapsed(),
                }));
            }
        }
    }
}
