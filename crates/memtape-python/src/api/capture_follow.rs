//! `memtape run`'s end-of-run summary without a second pass over the file, and without
//! the analysis' memory in the traced process: a helper process of memtape's own
//! (`memtape.cli.summary_process`, over [`super::followed_analysis`]) analyzes the
//! capture while the program runs, reading each block as the flusher writes it. When the
//! program ends, it has only the last blocks left to read, and sends the summary back.
//! The analysis' tables (the live blocks, tens of MiB for a program with millions of
//! small objects) live in the helper, not in the process the user watches the memory of.
//!
//! The helper is started through `/bin/sh`, which runs it in the background and exits at
//! once: it is no child of the program's, so a program waiting for all its children
//! (`os.wait()` until `ChildProcessError`) neither waits for it nor reaps it. It runs in a
//! process group of its own (a Ctrl-C at the terminal is the program's), niced. The shell
//! is started before the capture, so nothing of its start is recorded.
//!
//! One socket connects the two (the helper's standard output). The traced process sends
//! the capture's path and a NUL once the capture has created the file, then `F` once the
//! capture's writer has written its last byte; the helper answers with the summary (JSON)
//! and ends. Closed without `F` (the traced process ends without a summary, is killed, or
//! is a forked child whose copy is dropped while the parent holds its own), the helper
//! ends at once once every copy is closed. Writes never raise SIGPIPE: a program may have
//! set it to kill the process.

use std::ffi::OsString;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;

/// How long one read of the summary waits before pending signals are looked at (a
/// Ctrl-C while the helper reads the end of a long capture stops the wait).
const READ_SLICE: Duration = Duration::from_millis(100);

/// The summary's analysis, made by a helper process following a capture file while it is
/// written.
#[pyclass(name = "CaptureFollower", module = "memtape._native")]
pub(crate) struct CaptureFollower {
    /// Connected to the helper; `None` once finished.
    socket: Option<UnixStream>,
    /// The process that started the helper (a forked child's copy sends nothing).
    pid: u32,
}

impl CaptureFollower {
    /// Sends `bytes` to the helper, all of them.
    fn send(&self, bytes: &[u8]) -> PyResult<()> {
        let socket = self
            .socket
            .as_ref()
            .filter(|_| self.pid == std::process::id())
            .ok_or_else(|| PyRuntimeError::new_err("the summary process is not followed here"))?;
        let mut rest = bytes;
        while !rest.is_empty() {
            // SAFETY: the socket's descriptor is open (owned by `socket`); `rest` is a
            // live buffer of `rest.len()` bytes.
            let n = unsafe {
                libc::send(
                    socket.as_raw_fd(),
                    rest.as_ptr().cast(),
                    rest.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                return Err(PyOSError::new_err(format!(
                    "the summary process has ended: {e}"
                )));
            }
            rest = &rest[n as usize..];
        }
        Ok(())
    }
}

#[pymethods]
impl CaptureFollower {
    /// Starts the helper: `command` (the interpreter and its arguments) run in the
    /// background through `/bin/sh`, its standard output a socket connected to this
    /// object. It waits for [`Self::follow`].
    #[new]
    fn new(command: Vec<OsString>) -> PyResult<Self> {
        let not_started = |e: std::io::Error| {
            PyOSError::new_err(format!("cannot start the summary process: {e}"))
        };
        if command.is_empty() {
            return Err(PyOSError::new_err("no command for the summary process"));
        }
        let (ours, theirs) = UnixStream::pair().map_err(not_started)?;
        let status = Command::new("/bin/sh")
            .arg("-c")
            .arg("\"$@\" &")
            .arg("sh")
            .args(&command)
            .stdin(Stdio::null())
            .stdout(Stdio::from(OwnedFd::from(theirs)))
            .stderr(Stdio::null())
            .process_group(0)
            .status()
            .map_err(not_started)?;
        if !status.success() {
            return Err(PyOSError::new_err(format!(
                "cannot start the summary process: /bin/sh ended with {status}"
            )));
        }
        ours.set_read_timeout(Some(READ_SLICE))
            .map_err(not_started)?;
        Ok(Self {
            socket: Some(ours),
            pid: std::process::id(),
        })
    }

    /// Begins reading `path`, the capture file being written.
    fn follow(&mut self, path: PathBuf) -> PyResult<()> {
        // A pipe or a device read there would take bytes from its reader, not follow them.
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            return Err(PyOSError::new_err(format!(
                "{} is not a regular file: the summary reads it at the end",
                path.display()
            )));
        }
        let mut message = path.into_os_string().into_vec();
        message.push(0);
        self.send(&message)
    }

    /// The summary, once the capture has ended (its writer has written its last byte):
    /// the helper reads what is left and answers with the summary's fields as JSON (or
    /// `{"error": ...}`). Pending signals are handled while it works: a Ctrl-C raises
    /// KeyboardInterrupt here.
    fn finish(&mut self, py: Python<'_>) -> PyResult<String> {
        self.send(b"F")?;
        let socket = self
            .socket
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("the summary was read already"))?;
        let mut answer = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        loop {
            let read = py.detach(|| (&socket).read(&mut chunk));
            match read {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    py.check_signals()?;
                }
                Err(e) => {
                    return Err(PyOSError::new_err(format!(
                        "cannot read the summary process' answer: {e}"
                    )))
                }
            }
        }
        String::from_utf8(answer)
            .map_err(|_| PyRuntimeError::new_err("the summary process answered garbage"))
    }
}
