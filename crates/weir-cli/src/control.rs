//! The control plane's own runtime: one thread with its own I/O driver and timers, for what
//! must answer while the job's tasks keep every worker of the job's runtime busy: signals and
//! the HTTP server. On the job's runtime a SIGTERM to a statement set of 1 000 INSERTs was
//! acted on after 96 s (a debug build), the signal's task waiting behind thousands of busy
//! subtasks; here it is acted on at once.

use std::sync::OnceLock;

/// The control runtime, started on first use and kept for the life of the process.
///
/// # Panics
/// If the operating system gives no thread for it.
pub fn handle() -> &'static tokio::runtime::Handle {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("weir-control")
                .enable_all()
                .build()
                .expect("a thread for the control runtime")
        })
        .handle()
}
