//! The terminal chat: a ratatui + crossterm front end over a [`crate::chat::ChatEngine`].
//! It knows nothing of tensors; the engine runs on its own thread and the UI redraws at most
//! about 30 times a second. The terminal is restored on every exit: normal, error, panic, or a
//! termination signal.

pub mod app;
pub mod input;
pub mod keymap;
pub mod theme;
pub mod view;
pub mod wrap;

use app::App;
use crossterm::event::{self, DisableBracketedPaste, EnableBracketedPaste, Event};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use crossterm::{cursor, execute};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use std::io::stdout;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Time between frames at most (about 30 per second).
const FRAME: Duration = Duration::from_millis(33);

fn restore_terminal() {
    let _ = disable_raw_mode();
    let _ = execute!(
        stdout(),
        DisableBracketedPaste,
        LeaveAlternateScreen,
        cursor::Show
    );
}

/// Puts the terminal back however the chat ends.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> std::io::Result<Self> {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            hook(info);
        }));
        enable_raw_mode()?;
        let guard = TerminalGuard;
        execute!(stdout(), EnterAlternateScreen, EnableBracketedPaste)?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Run the chat until the user quits (or a termination signal arrives).
pub fn run(app: &mut App) -> crate::Result<()> {
    let signalled = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&signalled))?;
    }
    let _guard = TerminalGuard::enter()?;
    let mut terminal = Terminal::new(CrosstermBackend::new(stdout()))?;
    terminal.clear()?;
    let mut dirty = true;
    let mut last_draw = Instant::now() - FRAME;
    while !app.quit {
        // A termination signal, or a terminal that went away (a closed tmux pane or ssh session
        // does not always send SIGHUP, and a dead tty reads as "ready" forever): save and leave.
        if signalled.load(Ordering::Relaxed) || crossterm::terminal::size().is_err() {
            app.quit = true;
            break;
        }
        if app.poll_engine() || app.generating() {
            dirty = true;
        }
        if dirty && last_draw.elapsed() >= FRAME {
            terminal.draw(|f| view::draw(f, app))?;
            last_draw = Instant::now();
            dirty = false;
        }
        let wait = if dirty {
            FRAME.saturating_sub(last_draw.elapsed())
        } else {
            Duration::from_millis(50)
        };
        if event::poll(wait)? {
            // Take every event that is waiting before the next frame.
            loop {
                match event::read()? {
                    Event::Key(k) => app.on_key(k),
                    Event::Paste(s) => app.on_paste(&s),
                    _ => {}
                }
                dirty = true;
                if app.quit || !event::poll(Duration::ZERO)? {
                    break;
                }
            }
        }
    }
    if app.generating() {
        app.engine.stop();
    }
    Ok(())
}
