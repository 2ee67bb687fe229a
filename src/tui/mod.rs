//! The terminal chat: a ratatui + crossterm front end over a [`crate::chat::ChatEngine`].
//! It knows nothing of tensors; the engine runs on its own thread and the UI redraws at most
//! about 30 times a second. The terminal is restored on every exit: normal, error, panic, or a
//! termination signal.

pub mod app;
pub mod clipboard;
pub mod commands;
pub mod input;
pub mod keymap;
pub mod markdown;
pub mod theme;
pub mod tree_panel;
pub mod view;
pub mod wrap;

use app::App;
use crossterm::event::{
    self, DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture,
    Event,
};
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
        DisableMouseCapture,
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
        execute!(
            stdout(),
            EnterAlternateScreen,
            EnableBracketedPaste,
            EnableMouseCapture
        )?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// True when the terminal on stdin has hung up (its pty closed: a killed tmux pane, a dropped
/// ssh session). Such a tty reads as endless end-of-file, which crossterm's reader spins on.
fn terminal_hung_up() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n > 0 && fd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// Watches for termination signals and a hung-up terminal. It raises `flag` so the main loop
/// leaves cleanly; if the loop has not left shortly after (it can be stuck inside the event
/// reader on a dead tty), it restores the terminal and exits. Transcripts are saved after each
/// turn, so at most the turn in progress is lost.
fn spawn_watchdog(flag: Arc<AtomicBool>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGHUP, SIGINT])?;
    std::thread::Builder::new()
        .name("treespec-watchdog".into())
        .spawn(move || loop {
            let signalled = signals.pending().next().is_some();
            if signalled || terminal_hung_up() {
                flag.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(500));
                restore_terminal();
                std::process::exit(if signalled { 130 } else { 129 });
            }
            std::thread::sleep(Duration::from_millis(200));
        })?;
    Ok(())
}

/// Run the chat until the user quits (or a termination signal arrives).
pub fn run(app: &mut App) -> crate::Result<()> {
    let signalled = Arc::new(AtomicBool::new(false));
    spawn_watchdog(Arc::clone(&signalled))?;
    let _guard = TerminalGuard::enter()?;
    let mut terminal = Terminal::new(CrosstermBackend::new(stdout()))?;
    terminal.clear()?;
    let mut dirty = true;
    let mut last_draw = Instant::now() - FRAME;
    while !app.quit {
        // A termination signal or a hung-up terminal (raised by the watchdog): leave.
        if signalled.load(Ordering::Relaxed) {
            app.quit = true;
            break;
        }
        if app.poll_engine() || app.generating() {
            dirty = true;
        }
        if let Some(text) = app.clipboard.take() {
            // Written between two frames, so that it never lands inside a drawn line.
            execute!(stdout(), crossterm::style::Print(clipboard::osc52(&text)))?;
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
                // (A mouse that only moves changes nothing: no frame for it.)
                let changed = match event::read()? {
                    Event::Key(k) => {
                        app.on_key(k);
                        true
                    }
                    Event::Paste(s) => {
                        app.on_paste(&s);
                        true
                    }
                    Event::Mouse(m) => app.on_mouse(m),
                    _ => true,
                };
                dirty |= changed;
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
