//! `foliosim._core`: the private compiled module behind the `foliosim` Python
//! package. Thin: every function forwards to `foliosim::api` and passes JSON
//! strings across; the Python side owns parsing, pandas and the CLI.
//!
//! Runs release the GIL (`Python::detach`); the progress closure re-attaches
//! about every 100 ms to check signals (Ctrl-C) and call the Python callback.

use foliosim::api;
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

// ---- errors ----------------------------------------------------------------
// The engine's `api::Error` says whose a failure is; it becomes one class of
// a small hierarchy under `foliosim.Error`, here and only here (`to_pyerr`).
// The classes are made at import with Python's `type`, so that a class can
// keep the builtin base it had (ConfigError is a ValueError, InternalError a
// RuntimeError) beside `Error`. Each carries `exit_code`, the CLI's: 2 for
// what the user can fix, 1 for a bug.

/// (class name, builtin base, exit code, docstring), `Error` first.
const ERROR_CLASSES: [(&str, &str, i32, &str); 6] = [
    ("Error", "Exception", 1, "Any failure foliosim reports. `exit_code` is the CLI's exit code for it."),
    (
        "ConfigError",
        "ValueError",
        2,
        "Invalid foliosim input. str(err) is the one-line message `FILE:LINE: KEY: REASON`; \
         the attributes file, line (int or None), key and reason hold its parts.",
    ),
    (
        "WorkloadError",
        "ValueError",
        2,
        "The workload cannot be set up or run as asked (a trace that cannot be read or \
         converted, parameters this machine cannot honour).",
    ),
    (
        "OutOfMemoryError",
        "Exception",
        2,
        "The simulated machine ran out of memory where the run cannot go on: a bigger \
         machine or a smaller workload fixes it.",
    ),
    (
        "Cancelled",
        "Exception",
        2,
        "The run was stopped (Ctrl-C, a Cancel handle, a progress callback returning False) \
         before its measured window began: there is no measurement to return.",
    ),
    (
        "InternalError",
        "RuntimeError",
        1,
        "A bug in foliosim's core (a broken invariant or a Rust panic): str(err) says where. \
         An Exception, unlike pyo3's PanicException (a BaseException that `except Exception` misses).",
    ),
];

/// The classes of `ERROR_CLASSES`, in its order.
static ERRORS: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

fn error_classes(py: Python<'_>) -> PyResult<&Vec<Py<PyType>>> {
    ERRORS.get_or_try_init(py, || {
        let builtins = py.import("builtins")?;
        let make = builtins.getattr("type")?;
        let mut out: Vec<Py<PyType>> = Vec::new();
        for (name, base, exit_code, doc) in ERROR_CLASSES {
            let builtin = builtins.getattr(base)?;
            let bases = match out.first() {
                Some(error) => PyTuple::new(py, [error.bind(py).as_any().clone(), builtin])?,
                None => PyTuple::new(py, [builtin])?,
            };
            let ns = PyDict::new(py);
            ns.set_item("__module__", "foliosim")?;
            ns.set_item("__doc__", doc)?;
            ns.set_item("exit_code", exit_code)?;
            let class = make.call1((name, bases, ns))?.cast_into::<PyType>().map_err(PyErr::from)?;
            out.push(class.unbind());
        }
        Ok(out)
    })
}

/// A new exception of class `i` of `ERROR_CLASSES` with `msg`.
fn new_error(py: Python<'_>, i: usize, msg: String) -> PyErr {
    match error_classes(py) {
        Ok(classes) => PyErr::from_type(classes[i].bind(py).clone(), msg),
        Err(e) => e,
    }
}

/// The one mapping of the engine's errors to Python's.
fn to_pyerr(py: Python<'_>, e: api::Error) -> PyErr {
    let msg = e.to_string();
    match e {
        api::Error::Config(c) => {
            let err = new_error(py, 1, msg);
            let value = err.value(py);
            // Setting attributes on a fresh exception instance cannot fail in practice;
            // if it did, the message alone still carries everything.
            let _ = value.setattr("file", c.file.as_str());
            let _ = value.setattr("line", c.line);
            let _ = value.setattr("key", c.key.as_str());
            let _ = value.setattr("reason", c.reason.as_str());
            err
        }
        api::Error::Workload(_) => new_error(py, 2, msg),
        api::Error::OutOfMemory(_) => new_error(py, 3, msg),
        api::Error::Cancelled => new_error(py, 4, msg),
        api::Error::Internal(_) => new_error(py, 5, msg),
    }
}

// ---- panics ----------------------------------------------------------------
// A panic in the core must not print a Rust backtrace into the CLI's one-line
// error contract, nor reach Python as pyo3's PanicException (a BaseException).
// Calls into the core run inside `guarded`, which catches the panic and turns
// it into an InternalError whose message has the location; the panic hook
// stays quiet for those (unless FOLIOSIM_DEBUG is set) and defers to the
// previous hook for any other panic in the process.

thread_local! {
    static IN_GUARD: Cell<u32> = const { Cell::new(0) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn debug_enabled() -> bool {
    std::env::var_os("FOLIOSIM_DEBUG").is_some_and(|v| !v.is_empty() && v != "0")
}

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_GUARD.with(|g| g.get()) == 0 || debug_enabled() {
                prev(info);
            }
            let payload = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("panicked{at}: {payload}")));
        }));
    });
}

/// Runs `f`, turning a panic into `Err(message)` (message: where and what).
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    IN_GUARD.with(|g| g.set(g.get() + 1));
    let r = catch_unwind(AssertUnwindSafe(f));
    IN_GUARD.with(|g| g.set(g.get() - 1));
    r.map_err(|_| LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| "panicked".to_string()))
}

/// A panic caught in the core: an internal error.
fn panic_error(msg: String) -> PyErr {
    Python::attach(|py| new_error(py, 5, format!("foliosim core {msg}")))
}

/// What `guarded` returned from a call of the engine, as Python sees it.
fn engine<T>(py: Python<'_>, r: Result<Result<T, api::Error>, String>) -> PyResult<T> {
    r.map_err(panic_error)?.map_err(|e| to_pyerr(py, e))
}

/// A stop flag for runs: `cancel()` from any thread (or a signal handler)
/// and every run given this handle stops at its next progress check (about
/// every 100 ms of host time), returning its partial result with
/// `interrupted` set. Ctrl-C reaches only runs in the main thread; this
/// reaches runs started from other threads too.
#[pyclass(module = "foliosim", frozen)]
struct Cancel {
    flag: Arc<AtomicBool>,
}

#[pymethods]
impl Cancel {
    #[new]
    fn new() -> Self {
        Cancel { flag: Arc::new(AtomicBool::new(false)) }
    }

    /// Stop every run that holds this handle (and any started with it later).
    fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }

    /// Whether `cancel()` was called.
    #[getter]
    fn cancelled(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    fn __repr__(&self) -> String {
        format!("<foliosim.Cancel cancelled={}>", if self.cancelled() { "True" } else { "False" })
    }
}

/// Runs `f` with the GIL released, handing it a progress closure that checks
/// the cancel flag and signals and calls `callback(sim_s, sim_total_s)` (if
/// given).
///
/// A cancelled handle, a KeyboardInterrupt (from the signal check or raised
/// by the callback) or a callback returning False stops the run: `f` then
/// returns its partial, `"interrupted": true` result, which is returned
/// normally. Any other exception raised by the callback stops the run and is
/// re-raised.
fn with_progress<F>(py: Python<'_>, callback: Option<Py<PyAny>>, cancel: Option<Py<Cancel>>, f: F) -> PyResult<String>
where
    F: FnOnce(&mut dyn FnMut(&api::Progress) -> bool) -> Result<String, api::Error> + Send,
{
    let mut pending: Option<PyErr> = None;
    let flag = cancel.map(|c| Arc::clone(&c.get().flag));
    let out = {
        let pending = &mut pending;
        let callback = &callback;
        py.detach(move || {
            let stopped = || flag.as_ref().is_some_and(|f| f.load(Ordering::SeqCst));
            let mut cb = |p: &api::Progress| -> bool {
                if stopped() {
                    return false;
                }
                Python::attach(|py| {
                    if let Err(e) = py.check_signals() {
                        if !e.is_instance_of::<PyKeyboardInterrupt>(py) {
                            *pending = Some(e);
                        }
                        return false;
                    }
                    // (A signal handler may have just cancelled this run.)
                    if stopped() {
                        return false;
                    }
                    let Some(cb) = callback else { return true };
                    match cb.call1(py, (p.sim_s, p.sim_total_s)) {
                        // None (no return statement) means "go on".
                        Ok(r) => r.is_none(py) || r.is_truthy(py).unwrap_or(true),
                        Err(e) => {
                            if !e.is_instance_of::<PyKeyboardInterrupt>(py) {
                                *pending = Some(e);
                            }
                            false
                        }
                    }
                })
            };
            guarded(|| f(&mut cb))
        })
    };
    if let Some(e) = pending {
        return Err(e);
    }
    engine(py, out)
}

/// Validate and normalise a TOML config; returns the normalised config as JSON.
#[pyfunction]
#[pyo3(signature = (text, filename = "<string>"))]
fn load_toml(py: Python<'_>, text: &str, filename: &str) -> PyResult<String> {
    let (text, filename) = (text.to_owned(), filename.to_owned());
    engine(py, py.detach(move || guarded(|| api::load_toml(&text, &filename))))
}

/// Same, for a config given as JSON text (a dict serialised). Relative paths
/// in it start at `base_dir` (default: the current directory).
#[pyfunction]
#[pyo3(signature = (text, origin = "<dict>", base_dir = ""))]
fn load_json(py: Python<'_>, text: &str, origin: &str, base_dir: &str) -> PyResult<String> {
    let (text, origin, dir) = (text.to_owned(), origin.to_owned(), base_dir.to_owned());
    engine(py, py.detach(move || guarded(|| api::load_json_in(&text, &origin, &dir))))
}

/// A config as JSON (not normalised) with its relative paths made absolute
/// from `base_dir`, the directory of the file it came from.
#[pyfunction]
#[pyo3(signature = (text, origin, base_dir))]
fn resolve_paths(py: Python<'_>, text: &str, origin: &str, base_dir: &str) -> PyResult<String> {
    let (text, origin, dir) = (text.to_owned(), origin.to_owned(), base_dir.to_owned());
    engine(py, py.detach(move || guarded(|| api::resolve_paths_json(&text, &origin, &dir))))
}

/// Panics inside the core's guard, as a bug would: for the tests of the
/// panic -> InternalError mapping.
#[pyfunction]
fn _panic_for_tests(py: Python<'_>, message: &str) -> PyResult<()> {
    let message = message.to_owned();
    py.detach(move || guarded(|| -> () { panic!("{message}") })).map_err(panic_error)
}

/// Run one simulation of a (normalised or not) JSON config; returns the
/// result as JSON. `progress(sim_s, sim_total_s)` is called about every
/// 100 ms; returning False, or `cancel.cancel()`, stops the run early.
#[pyfunction]
#[pyo3(signature = (config_json, progress = None, cancel = None))]
fn run_json(py: Python<'_>, config_json: &str, progress: Option<Py<PyAny>>, cancel: Option<Py<Cancel>>) -> PyResult<String> {
    let config_json = config_json.to_owned();
    with_progress(py, progress, cancel, move |cb| api::run_json(&config_json, cb))
}

/// Everything `foliosim list` shows, as JSON.
#[pyfunction]
fn catalog_json(py: Python<'_>) -> PyResult<String> {
    py.detach(|| guarded(api::catalog_json)).map_err(panic_error)
}

/// The model's will-it-scale process image (its mapped pieces and their
/// resident pages), as JSON.
#[pyfunction]
fn process_image_json(py: Python<'_>) -> PyResult<String> {
    py.detach(|| guarded(api::process_image_json)).map_err(panic_error)
}

/// How each value of a machine profile (a built-in name or a path relative
/// to `base_dir`) was obtained, as JSON (docs/profiles.md).
#[pyfunction]
#[pyo3(signature = (name, base_dir = ""))]
fn profile_explain_json(py: Python<'_>, name: &str, base_dir: &str) -> PyResult<String> {
    let (name, dir) = (name.to_owned(), base_dir.to_owned());
    engine(py, py.detach(move || guarded(|| api::profile_explain_json(&name, &dir).map_err(api::Error::from))))
}

/// One speed benchmark of the simulator: "anon_faults", "tlb_hits",
/// "pf1_threads64" or "big_machine". Returns JSON with the figures measured.
#[pyfunction]
fn bench_json(py: Python<'_>, which: &str) -> PyResult<String> {
    let which = which.to_owned();
    engine(py, py.detach(move || guarded(|| api::bench_json(&which))))
}

/// The instruction count of "anon_fault_instructions" or
/// "tlb_hit_instructions": `child` (a command running `bench_events`) is run
/// under valgrind's callgrind for two simulated lengths. Returns JSON.
#[pyfunction]
fn bench_instructions_json(py: Python<'_>, which: &str, child: Vec<String>) -> PyResult<String> {
    let which = which.to_owned();
    engine(py, py.detach(move || guarded(|| api::bench_instructions_json(&which, &child))))
}

/// One run of a counted workload ("anon_faults", "tlb_hits") for `sim_s`
/// simulated seconds; the number of events (faults, TLB hits) it counted.
#[pyfunction]
fn bench_events(py: Python<'_>, workload: &str, sim_s: f64) -> PyResult<u64> {
    let workload = workload.to_owned();
    engine(py, py.detach(move || guarded(|| api::bench_events(&workload, sim_s))))
}

/// Convert a valgrind lackey+syscall log (file or FIFO) into a foliosim
/// trace at `out_path`; returns statistics as JSON.
#[pyfunction]
fn trace_from_valgrind_log(py: Python<'_>, log_path: &str, out_path: &str, meta_json: &str) -> PyResult<String> {
    let (l, o, m) = (log_path.to_string(), out_path.to_string(), meta_json.to_string());
    engine(py, py.detach(move || guarded(|| api::trace_from_valgrind_log(&l, &o, &m))))
}

/// Convert the valgrind logs of a recorded process tree (`DIR/log.PID.N`)
/// into a trace; statistics as JSON.
#[pyfunction]
fn trace_from_valgrind_logs(py: Python<'_>, dir: &str, out_path: &str, meta_json: &str, root: u64) -> PyResult<String> {
    let (d, o, m) = (dir.to_string(), out_path.to_string(), meta_json.to_string());
    engine(py, py.detach(move || guarded(|| api::trace_from_valgrind_logs(&d, &o, &m, root))))
}

/// Convert perf's pipe stream read from `input_path` (its stdout as
/// /proc/self/fd/N) into a trace at `out_path`, the tracepoints' formats
/// read from `tracefs`; the recorder's wrapper's status file is read when
/// the stream ends. Statistics as JSON.
#[pyfunction]
fn trace_from_perf(
    py: Python<'_>,
    input_path: &str,
    out_path: &str,
    meta_json: &str,
    status_path: &str,
    tracefs: &str,
) -> PyResult<String> {
    let a = [input_path, out_path, meta_json, status_path, tracefs].map(str::to_string);
    engine(py, py.detach(move || guarded(|| api::trace_from_perf(&a[0], &a[1], &a[2], &a[3], &a[4]))))
}

/// The Meta JSON of a trace (read from its head only), "" if it has none.
#[pyfunction]
fn trace_meta(py: Python<'_>, path: &str) -> PyResult<String> {
    let p = path.to_string();
    engine(py, py.detach(move || guarded(|| api::trace_meta(&p))))
}

/// A listener for the logs valgrind streams with --log-socket: `port` to
/// give valgrind, `convert` to run (in a thread: it returns once `stop` was
/// called and every connection is read), `stop` when valgrind has exited.
#[pyclass(frozen)]
struct ValgrindListener {
    listener: std::sync::Mutex<Option<std::net::TcpListener>>,
    stop: std::sync::atomic::AtomicBool,
    port: u16,
}

#[pymethods]
impl ValgrindListener {
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        let l = api::valgrind_listener().map_err(|e| to_pyerr(py, e))?;
        let port = l.local_addr().map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?.port();
        Ok(ValgrindListener { listener: std::sync::Mutex::new(Some(l)), stop: false.into(), port })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// valgrind has exited: `convert` returns once it has read what is left.
    fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Convert every instance's log as it arrives into the trace
    /// `out_path` (`root`: the recorded command's pid); statistics as JSON.
    fn convert(&self, py: Python<'_>, out_path: &str, meta_json: &str, root: u64) -> PyResult<String> {
        let l = self.listener.lock().unwrap_or_else(|e| e.into_inner()).take();
        let l = l.ok_or_else(|| pyo3::exceptions::PyValueError::new_err("this listener has converted already"))?;
        let (o, m) = (out_path.to_string(), meta_json.to_string());
        engine(py, py.detach(|| guarded(|| api::trace_from_valgrind_socket(l, &self.stop, &o, &m, root))))
    }
}

/// Read and check a whole trace; returns {"records", "accesses", "files", "regions", "meta"} as JSON.
#[pyfunction]
fn trace_info(py: Python<'_>, path: &str) -> PyResult<String> {
    let p = path.to_string();
    engine(py, py.detach(move || guarded(|| api::trace_info(&p))))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    install_panic_hook();
    for ((name, ..), class) in ERROR_CLASSES.iter().zip(error_classes(py)?) {
        m.add(*name, class.bind(py))?;
    }
    m.add_class::<Cancel>()?;
    m.add_class::<ValgrindListener>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(load_toml, m)?)?;
    m.add_function(wrap_pyfunction!(load_json, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_paths, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    m.add_function(wrap_pyfunction!(run_json, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_json, m)?)?;
    m.add_function(wrap_pyfunction!(process_image_json, m)?)?;
    m.add_function(wrap_pyfunction!(profile_explain_json, m)?)?;
    m.add_function(wrap_pyfunction!(bench_json, m)?)?;
    m.add_function(wrap_pyfunction!(bench_instructions_json, m)?)?;
    m.add_function(wrap_pyfunction!(bench_events, m)?)?;
    m.add_function(wrap_pyfunction!(trace_from_valgrind_log, m)?)?;
    m.add_function(wrap_pyfunction!(trace_from_valgrind_logs, m)?)?;
    m.add_function(wrap_pyfunction!(trace_info, m)?)?;
    m.add_function(wrap_pyfunction!(trace_from_perf, m)?)?;
    m.add_function(wrap_pyfunction!(trace_meta, m)?)?;
    Ok(())
}
