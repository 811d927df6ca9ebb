//! `rotate`'s progress line on stderr: spokes done of total and the current stage,
//! redrawn in place. Only on a terminal and with table output: a pipe, a log file or
//! `-o json` gets nothing but the result.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

use spokekeeper::rotate::{Progress, Step};

#[derive(Default)]
struct Line {
    total: usize,
    done: usize,
    shown: bool,
}

/// The progress callback, and a handle that clears the line before the result prints.
pub(super) struct Shown {
    line: Arc<Mutex<Line>>,
}

/// `Some` when progress should be shown: stderr is a terminal and the output a table.
pub(crate) fn on_terminal(table: bool) -> Option<(Progress, Shown)> {
    (table && std::io::stderr().is_terminal()).then(start)
}

fn start() -> (Progress, Shown) {
    let line = Arc::new(Mutex::new(Line::default()));
    let shared = line.clone();
    let progress = Progress::new(move |step| {
        let Ok(mut l) = shared.lock() else { return };
        let text = match step {
            Step::Start { total } => {
                l.total = total;
                format!("[0/{total}] starting")
            }
            Step::Stage { spoke, stage } => format!("[{}/{}] {spoke}: {stage}", l.done, l.total),
            Step::Done { spoke } => {
                l.done += 1;
                format!("[{}/{}] {spoke}: done", l.done, l.total)
            }
            Step::Fleet { stage } => format!("[{}/{}] fleet: {stage}", l.done, l.total),
        };
        l.shown = true;
        // Carriage return and erase-line: one line, redrawn.
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{text}");
        let _ = err.flush();
    });
    (progress, Shown { line })
}

impl Shown {
    /// Erases the progress line, so the result starts on a clean line.
    pub(super) fn clear(&self) {
        if self.line.lock().is_ok_and(|l| l.shown) {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}
