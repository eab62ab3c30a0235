//! Rule: hostile input (safetensors headers, `config.json`, the daemon TOML,
//! stream URIs) gives a clear error every time: never a panic, a hang or an
//! absurd allocation. Seeded, deterministic mutation fuzzing, at least 10,000
//! cases per input kind (`ROADSEG_FUZZ_CASES=N` runs more or fewer); a failure
//! names the test, seed and case so it can be replayed alone;
//! `ROADSEG_FUZZ_SHOW=1` prints every error message (to judge them).
//!
//! Every allocation in this test binary is watched: one over [`ALLOC_CAP`]
//! is refused (the process aborts naming its size), and each test checks the
//! largest one stayed below [`ALLOC_LIMIT`].

#![cfg(feature = "video")]

// Its own binary: the allocator below watches every allocation in the
// process, which means something only when no other test runs beside it.
#[path = "it/common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime};

use roadseg::backend::cpu::CpuBackend;
use roadseg::checkpoint::{Checkpoint, SegformerConfig};
use roadseg::daemon::config::{DaemonConfig, SourceUri, Sources, StreamConfig, Summary, check_sources, plan_reload};
use roadseg::model::SegformerWeights;
use roadseg::video::source::{SourceSettings, describe};
use serde_json::{Value, json};

// ---------------------------------------------------------------- allocation

/// Refused outright: a hostile length must be rejected long before this.
const ALLOC_CAP: usize = 1 << 30;
/// The largest allocation any case may make (the fixtures are a few hundred KB).
const ALLOC_LIMIT: usize = 64 << 20;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

struct Watched;

unsafe impl GlobalAlloc for Watched {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Watched = Watched;

// ---------------------------------------------------------------- harness

/// xorshift64*: small, fast, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so neighbouring seeds diverge at once.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn cases() -> usize {
    std::env::var("ROADSEG_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

/// A case's own seed: any case can be replayed without the ones before it.
fn case_seed(base: u64, case: usize) -> u64 {
    base ^ (case as u64).wrapping_mul(0xA24B_AED4_963E_E407)
}

/// Runs `one(rng, case)` for every case on a worker thread. Panics are caught
/// and collected (seed, case, input); a case that takes longer than `hang`
/// fails the test as a hang. `one` returns a description of its input and an
/// optional property violation.
fn fuzz(name: &'static str, base: u64, hang: Duration, one: impl Fn(&mut Rng) -> (String, Option<String>) + Send + Sync + 'static) {
    // One line per caught panic, not a backtrace each.
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}"))));
    let total = cases();
    let progress = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = mpsc::channel();
    let worker_progress = progress.clone();
    let started = Instant::now();
    std::thread::spawn(move || {
        let mut failures = Vec::new();
        let mut accepted = 0usize;
        for case in 0..total {
            ACCEPTED.with(|a| a.set(false));
            worker_progress.store(case, Ordering::SeqCst);
            let seed = case_seed(base, case);
            let t0 = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| one(&mut Rng::new(seed))));
            let took = t0.elapsed();
            match result {
                Ok((_, None)) => {}
                Ok((input, Some(violation))) => {
                    failures.push(format!("case {case} (seed {seed:#x}): {}; input: {input}", shorten(&violation)))
                }
                Err(panic) => {
                    let msg = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    let input = LAST_INPUT.with(|l| l.borrow().clone());
                    failures.push(format!("case {case} (seed {seed:#x}) PANICKED: {}; input: {input}", shorten(&msg)));
                }
            }
            accepted += usize::from(ACCEPTED.with(|a| a.get()));
            if took > hang {
                failures.push(format!("case {case} (seed {seed:#x}) took {took:?} (limit {hang:?})"));
            }
            if failures.len() >= 20 {
                break;
            }
        }
        let _ = done_tx.send((failures, accepted));
    });
    let (failures, accepted) = loop {
        match done_rx.recv_timeout(Duration::from_secs(1)) {
            Ok(f) => break f,
            Err(mpsc::RecvTimeoutError::Timeout) if started.elapsed() < Duration::from_secs(300) => continue,
            Err(_) => {
                let case = progress.load(Ordering::SeqCst);
                panic!("{name}: hung at case {case} (seed {:#x})", case_seed(base, case));
            }
        }
    };
    let largest = LARGEST.load(Ordering::Relaxed);
    eprintln!(
        "{name}: {total} cases in {:.2?}: {accepted} accepted, {} rejected; largest allocation so far {largest} bytes",
        started.elapsed(),
        total - accepted
    );
    assert!(failures.is_empty(), "{name}: {} failure(s):\n{}", failures.len(), failures.join("\n"));
    // Both outcomes, or the mutations are too weak (or too strong) to test anything.
    assert!(total < 1000 || (accepted > 0 && accepted < total), "{name}: {accepted} of {total} cases accepted");
    assert!(largest <= ALLOC_LIMIT, "{name}: an allocation of {largest} bytes (limit {ALLOC_LIMIT})");
}

/// Marks the running case as accepted (valid input); returns no violation.
fn accepted() -> Option<String> {
    ACCEPTED.with(|a| a.set(true));
    None
}

thread_local! {
    static ACCEPTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The input of the running case, shown when it panics (set by [`note`]
    /// before the code under test runs).
    static LAST_INPUT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Records the input about to be tried (shown if it panics), returning it.
fn note(input: String) -> String {
    LAST_INPUT.with(|l| *l.borrow_mut() = input.clone());
    input
}

/// An error must say something, on one line for file errors.
fn check_message(what: &str, msg: &str, one_line: bool) -> Option<String> {
    if std::env::var_os("ROADSEG_FUZZ_SHOW").is_some() {
        eprintln!("{what}: {msg}");
    }
    if msg.trim().is_empty() {
        return Some(format!("{what}: empty error message"));
    }
    if one_line && msg.contains('\n') {
        return Some(format!("{what}: error is not one line: {msg}"));
    }
    None
}

fn shorten(s: &str) -> String {
    let s: String = s.chars().take(300).collect();
    format!("{s:?}")
}

/// Generic byte mutations shared by the text fuzzers.
fn mutate_bytes(rng: &mut Rng, bytes: &mut Vec<u8>, log: &mut Vec<String>) {
    const INTERESTING: &[&[u8]] = &[
        b"\0", b"\xff", b"\xc3", b"\xe2\x82", "é".as_bytes(), "中".as_bytes(), "🚗".as_bytes(), b"\"", b"'", b"\\", b"\n", b"\r\n",
        b"[", b"]", b"{", b"}", b",", b":", b"=", b"#", b"@", b"/", b"?", b"&", b"%", b"%00", b"%zz", b"-", b"1e999", b"-1",
        b"18446744073709551616", b"9223372036854775807", b"NaN", b"null", b"[[[[[[[[[[[[[[[[", b"{stream}", b"{start}", b"{",
    ];
    let n = bytes.len();
    match rng.below(8) {
        0 if n > 0 => {
            let i = rng.below(n);
            let bit = rng.below(8);
            bytes[i] ^= 1 << bit;
            log.push(format!("flip bit {bit} of byte {i}"));
        }
        1 => {
            let at = rng.below(n + 1);
            bytes.truncate(at);
            log.push(format!("truncate at {at}"));
        }
        2 => {
            let at = rng.below(n + 1);
            let ins: &[u8] = *rng.pick(INTERESTING);
            bytes.splice(at..at, ins.iter().copied());
            log.push(format!("insert {:?} at {at}", String::from_utf8_lossy(ins)));
        }
        3 if n > 0 => {
            let a = rng.below(n);
            let b = (a + 1 + rng.below(16)).min(n);
            bytes.drain(a..b);
            log.push(format!("delete {a}..{b}"));
        }
        4 if n > 0 => {
            let a = rng.below(n);
            let b = (a + 1 + rng.below(64)).min(n);
            let chunk: Vec<u8> = bytes[a..b].to_vec();
            let at = rng.below(n + 1);
            bytes.splice(at..at, chunk);
            log.push(format!("copy {a}..{b} to {at}"));
        }
        5 if n > 0 => {
            let i = rng.below(n);
            bytes[i] = rng.next() as u8;
            log.push(format!("random byte at {i}"));
        }
        6 if n > 0 => {
            // Replace a digit run with a huge or odd number.
            let i = rng.below(n);
            if let Some(start) = (i..n).find(|&j| bytes[j].is_ascii_digit()) {
                let end = (start..n).find(|&j| !bytes[j].is_ascii_digit()).unwrap_or(n);
                const NUMBERS: &[&[u8]] = &[b"0", b"99999999999999999999999", b"4294967296", b"18446744073709551615", b"1e308", b"-0", b"00"];
                let num: &[u8] = *rng.pick(NUMBERS);
                bytes.splice(start..end, num.iter().copied());
                log.push(format!("number at {start} -> {}", String::from_utf8_lossy(num)));
            }
        }
        _ => {
            let at = rng.below(n + 1);
            let times = 1 + rng.below(200);
            let ins = rng.pick(INTERESTING).repeat(times);
            bytes.splice(at..at, ins);
            log.push(format!("repeat insert x{times} at {at}"));
        }
    }
}

// ---------------------------------------------------------------- (a) safetensors

fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && let Ok(dir) = tempfile::tempdir_in(shm) {
        return dir;
    }
    tempfile::tempdir().unwrap()
}

const GOOD: &str = "tests/data/three-stage-fp16-161x97";

/// Loads a checkpoint folder the way every command does.
fn load_checkpoint(dir: &Path, backend: &CpuBackend) -> Result<(), String> {
    let mut ckpt = Checkpoint::open(dir).map_err(|e| e.to_string())?;
    SegformerWeights::load(&mut ckpt, backend).map(|_| ()).map_err(|e| e.to_string())
}

const DTYPES: &[&str] = &["F32", "F16", "BF16", "F64", "I8", "U8", "I64", "BOOL", "F8_E4M3", "F8_E5M2", "F4", "F6_E2M3", "E8M0", "C64", "f32", "", "QUUX"];

fn hostile_number(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => json!(0),
        1 => json!(1u64 << 60),
        2 => json!(u64::MAX),
        3 => json!(-1),
        4 => json!(1.5),
        5 => json!(usize::MAX / 2),
        6 => json!(1u64 << 32),
        7 => json!("12"),
        8 => Value::Null,
        _ => json!(rng.below(100_000)),
    }
}

/// One structured edit of a safetensors header.
fn mutate_header(rng: &mut Rng, header: &mut serde_json::Map<String, Value>, log: &mut Vec<String>) {
    let names: Vec<String> = header.keys().filter(|k| *k != "__metadata__").cloned().collect();
    let name = rng.pick(&names).clone();
    let Some(entry) = header.get_mut(&name).filter(|e| e.is_object()) else { return };
    let (Some(_), Some(_)) = (entry["shape"].as_array(), entry["data_offsets"].as_array().filter(|o| o.len() == 2)) else {
        return;
    };
    match rng.below(12) {
        0 => {
            let d = *rng.pick(DTYPES);
            entry["dtype"] = json!(d);
            log.push(format!("{name}: dtype {d}"));
        }
        1 => {
            let shape = entry["shape"].as_array_mut().unwrap();
            let v = hostile_number(rng);
            if shape.is_empty() || rng.chance(3) {
                shape.push(v.clone());
            } else {
                let i = rng.below(shape.len());
                shape[i] = v.clone();
            }
            log.push(format!("{name}: shape dim {v}"));
        }
        2 => {
            entry["shape"] = json!([]);
            log.push(format!("{name}: shape []"));
        }
        3 => {
            let i = rng.below(2);
            let v = hostile_number(rng);
            entry["data_offsets"][i] = v.clone();
            log.push(format!("{name}: data_offsets[{i}] = {v}"));
        }
        4 => {
            let o = entry["data_offsets"].clone();
            entry["data_offsets"] = json!([o[1], o[0]]);
            log.push(format!("{name}: offsets swapped"));
        }
        5 => {
            // Overlap: start a little earlier than it should.
            let a = entry["data_offsets"][0].as_u64().unwrap_or(0);
            let back = 1 + rng.below(64) as u64;
            entry["data_offsets"][0] = json!(a.saturating_sub(back));
            log.push(format!("{name}: offsets overlap by {back}"));
        }
        6 => {
            // The 2^60-byte tensor: rejected before anything is allocated.
            entry["shape"] = json!([1u64 << 30, 1u64 << 28]);
            entry["dtype"] = json!("F32");
            let a = entry["data_offsets"][0].as_u64().unwrap_or(0);
            entry["data_offsets"][1] = json!(a + (1u64 << 60));
            log.push(format!("{name}: 2^60-byte tensor"));
        }
        7 => {
            header.remove(&name);
            log.push(format!("{name}: removed"));
        }
        8 => {
            let other = rng.pick(&names).clone();
            let copy = header[&other].clone();
            header.insert(name.clone(), copy);
            log.push(format!("{name}: entry of {other}"));
        }
        9 => {
            let v = match rng.below(4) {
                0 => json!("a string"),
                1 => json!({"format": 5}),
                2 => json!([1, 2]),
                _ => Value::Null,
            };
            log.push(format!("__metadata__ = {v}"));
            header.insert("__metadata__".into(), v);
        }
        10 => {
            let field = *rng.pick(&["dtype", "shape", "data_offsets"]);
            entry.as_object_mut().unwrap().remove(field);
            log.push(format!("{name}: no {field}"));
        }
        _ => {
            let huge = format!("segformer.{}", "x".repeat(rng.below(5000)));
            header.insert(huge.clone(), json!({"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}));
            log.push(format!("extra empty tensor named {} chars", huge.len()));
        }
    }
}

/// A file made of a header (as text) and the original data section.
fn assemble(header: &str, data: &[u8], declared_len: Option<u64>) -> Vec<u8> {
    let len = declared_len.unwrap_or(header.len() as u64);
    let mut out = len.to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn hostile_safetensors_files_are_rejected_cleanly() {
    // Rule: a mutated model.safetensors (header bytes, lengths, JSON, offsets, dtypes, shapes) loads or fails with a one-line error; never a panic, hang or huge allocation.
    let good = common::repo().join(GOOD);
    let original = std::fs::read(good.join("model.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(original[..8].try_into().unwrap()) as usize;
    let header_text = std::str::from_utf8(&original[8..8 + header_len]).unwrap().to_string();
    let data = original[8 + header_len..].to_vec();
    let config = std::fs::read(good.join("config.json")).unwrap();
    // One folder per run; each case rewrites model.safetensors in it (in
    // memory where there is a tmpfs: 10,000 files of 165 KB).
    let tmp = scratch_dir();
    let dir = tmp.path().to_path_buf();
    std::fs::write(dir.join("config.json"), &config).unwrap();
    let backend = CpuBackend::new();
    assert!(load_checkpoint(&good, &backend).is_ok(), "the unmutated fixture loads");
    let _keep = tmp;

    fuzz("safetensors", 0x5AFE_7E25, Duration::from_secs(10), move |rng| {
        let mut log = Vec::new();
        let mut header: serde_json::Map<String, Value> = serde_json::from_str(&header_text).unwrap();
        let file = match rng.below(4) {
            // Structured header edits, re-serialised with a correct length.
            0 | 1 => {
                for _ in 0..1 + rng.below(3) {
                    mutate_header(rng, &mut header, &mut log);
                }
                let text = serde_json::to_string(&header).unwrap();
                if rng.chance(4) {
                    // Duplicate key: the text of one entry repeated with other offsets.
                    let name = header.keys().find(|k| *k != "__metadata__").cloned().unwrap_or_default();
                    let dup = format!("{},{:?}:{{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}}}", &text[..text.len() - 1], name);
                    log.push(format!("duplicate key {name}"));
                    assemble(&dup, &data, None)
                } else {
                    assemble(&text, &data, None)
                }
            }
            // Length prefix edits.
            2 => {
                let n = header_len as u64;
                let random = rng.next();
                let len = *rng.pick(&[0, 1, 2, n - 1, n + 1, n + 8, n * 2, original.len() as u64, u64::MAX, 1 << 60, 100_000_001, random]);
                log.push(format!("length prefix {len}"));
                assemble(&header_text, &data, Some(len))
            }
            // Raw byte edits, mostly inside the header.
            _ => {
                let mut bytes = original.clone();
                let limit = 8 + header_len + if rng.chance(4) { data.len() } else { 0 };
                let mut head = bytes[..limit].to_vec();
                for _ in 0..1 + rng.below(4) {
                    mutate_bytes(rng, &mut head, &mut log);
                }
                bytes.splice(..limit, head);
                bytes
            }
        };
        let input = note(format!("safetensors edits {log:?}"));
        std::fs::write(dir.join("model.safetensors"), &file).unwrap();
        let violation = match load_checkpoint(&dir, &backend) {
            Ok(()) => accepted(),
            Err(e) => check_message("load", &e, true),
        };
        (input, violation)
    });
}

// ---------------------------------------------------------------- (b) config.json

const CONFIG_FIELDS: &[&str] = &[
    "num_channels", "num_encoder_blocks", "depths", "sr_ratios", "hidden_sizes", "patch_sizes", "strides",
    "num_attention_heads", "mlp_ratios", "hidden_act", "decoder_hidden_size", "id2label", "label2id", "num_labels",
    "reshape_last_stage", "model_type",
];

fn hostile_json(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 2 { 8 } else { 11 }) {
        0..=2 => hostile_number(rng),
        3 => json!(rng.pick(&["", "gelu", "relu", "x".repeat(10_000).as_str(), "\u{0}", "é中🚗"]).to_string()),
        4 => json!(rng.chance(2)),
        5 => Value::Null,
        6 => json!(-(rng.below(1000) as i64)),
        7 => json!(f64::MAX),
        8 | 9 => Value::Array((0..rng.below(6)).map(|_| hostile_json(rng, depth + 1)).collect()),
        _ => {
            let mut m = serde_json::Map::new();
            for _ in 0..rng.below(4) {
                let k = rng.pick(&["0", "1", "255", "256", "-1", "00", "4294967296", "18446744073709551616", "road", ""]).to_string();
                m.insert(k, hostile_json(rng, depth + 1));
            }
            Value::Object(m)
        }
    }
}

#[test]
fn hostile_model_configs_are_rejected_cleanly() {
    // Rule: a mutated config.json parses or fails with a one-line error naming the file; a config that parses also loads or fails cleanly against real weights.
    let good = common::repo().join(GOOD);
    let original = std::fs::read_to_string(good.join("config.json")).unwrap();
    let weights = good.join("model.safetensors");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::copy(&weights, dir.join("model.safetensors")).unwrap();
    let backend = CpuBackend::new();
    let _keep = tmp;

    fuzz("config.json", 0xC0F1_6150, Duration::from_secs(10), move |rng| {
        let mut log = Vec::new();
        let text = if rng.chance(3) {
            let mut bytes = original.clone().into_bytes();
            for _ in 0..1 + rng.below(3) {
                mutate_bytes(rng, &mut bytes, &mut log);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            let mut cfg: serde_json::Map<String, Value> = serde_json::from_str(&original).unwrap();
            for _ in 0..1 + rng.below(3) {
                let field = rng.pick(CONFIG_FIELDS).to_string();
                let list = cfg.get(&field).and_then(Value::as_array).cloned();
                let value = match (rng.below(4), list) {
                    // One element of a list field.
                    (0, Some(mut l)) if !l.is_empty() => {
                        let i = rng.below(l.len());
                        l[i] = hostile_number(rng);
                        Value::Array(l)
                    }
                    // A list one longer or shorter.
                    (1, Some(mut l)) => {
                        if rng.chance(2) { l.pop(); } else { l.push(hostile_number(rng)); }
                        Value::Array(l)
                    }
                    (2, _) if field == "id2label" || field == "num_labels" => {
                        cfg.remove("id2label");
                        json!(*rng.pick(&[0u64, 1, 256, 1 << 20, 1 << 40, u64::MAX]))
                    }
                    _ => hostile_json(rng, 0),
                };
                log.push(format!("{field} = {}", shorten(&value.to_string())));
                if rng.chance(10) {
                    cfg.remove(&field);
                } else {
                    cfg.insert(field, value);
                }
            }
            serde_json::to_string(&cfg).unwrap()
        };
        let input = note(format!("config.json edits {log:?}"));
        let violation = match SegformerConfig::from_json(&text, "config.json") {
            Err(e) => {
                let e = e.to_string();
                check_message("from_json", &e, true).or_else(|| (!e.contains("config.json")).then(|| format!("error does not name the file: {e}")))
            }
            Ok(cfg) => {
                let labels = cfg.labels();
                if labels.is_empty() || labels.len() > 255 {
                    Some(format!("accepted a config with {} labels", labels.len()))
                } else {
                    std::fs::write(dir.join("config.json"), &text).unwrap();
                    match load_checkpoint(&dir, &backend) {
                        Ok(()) => accepted(),
                        Err(e) => check_message("load", &e, true),
                    }
                }
            }
        };
        (input, violation)
    });
}

// ---------------------------------------------------------------- (c) daemon TOML

const SECRET: &str = "s3cret-pass";

const HOSTILE_TOML_VALUES: &[&str] = &[
    "-1", "0", "1", "18446744073709551615", "18446744073709551616", "-9223372036854775808", "1e400", "nan", "inf", "-inf", "0.0",
    "1.5", "\"\"", "\" \"", "\"x\"", "[]", "[1, 2]", "[\"\", \"road\"]", "{}", "{ a = 1 }", "true", "false",
    "1979-05-27T07:32:00Z", "\"rtsp://alice:s3cret-pass@127.0.0.1:1/x\"", "\"rtsp://alice:s3cret-pass@[::1/x\"",
    "\"rtsp://alice:s3cret-pass@host:99999/x\"", "\"rtsp://alice:s3cret-pass@/x\"", "\"test://smpte?width=1&height=1\"",
    "\"test://ball?fps=0/0\"", "\"file:///nonexistent.mp4\"", "\"v4l2://\"", "\"0.0.0.0:0\"", "\"[::]:8554\"",
    "\"127.0.0.1:99999\"", "\"{stream}{start}{x}\"", "\"%n%s%05d/\"", "\"/\"", "\"{\"", "\"\\u0000\"", "\"é中🚗\"",
    "\"cuda:999999999999999999999\"", "\"cuda:\"", "\"cuda:0,0,0\"", "\"bf16\"", "\"accurate\"", "\"fp8\"", "[256, 0, -1]",
    "[255, 0]", "\"../../../../etc/passwd\"", "\"a//b\"",
];

/// A config with credentials in it, the case the leak check matters for.
fn secret_config() -> String {
    format!(
        "[rtsp]\nlisten = \"127.0.0.1:8554\"\nusername = \"viewer\"\npassword = \"{SECRET}\"\n\n\
         [[streams]]\nname = \"cam\"\nuri = \"rtsp://alice:{SECRET}@127.0.0.1:1/x\"\nlatency_ms = 300\n\
         [streams.output]\nstats = \"/tmp/{{stream}}-{{start}}.jsonl\"\nrtsp = \"{{stream}}\"\nfile = \"rec/{{stream}}.mp4\"\n\n\
         [[streams]]\nname = \"pattern\"\nuri = \"test://ball?width=320&height=240&fps=10\"\n[streams.output]\nstats = \"s.jsonl\"\n"
    )
}

/// Every occurrence of the secret is a URI password or the `password` value,
/// i.e. somewhere the daemon must mask it (a mutation can move it elsewhere,
/// e.g. into a stream name, where printing it is correct).
fn secret_only_in_secret_places(text: &str) -> bool {
    let all = text.matches(SECRET).count();
    let masked = text.matches(&format!("alice:{SECRET}@")).count() + text.matches(&format!("password = \"{SECRET}\"")).count();
    all > 0 && all == masked
}

#[test]
fn hostile_daemon_configs_are_rejected_cleanly() {
    // Rule: a mutated daemon TOML loads and validates or fails with an error naming the problem; never a panic or hang, and the secrets in it never reach a message or summary.
    let repo = common::repo();
    let bases: Vec<String> = vec![
        std::fs::read_to_string(repo.join("config/default.toml")).unwrap(),
        std::fs::read_to_string(repo.join("config/example-cameras.toml")).unwrap(),
        secret_config(),
    ];
    let reference = DaemonConfig::from_toml_str(&bases[0], "default.toml").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("roadseg.toml");
    let _keep = tmp;

    fuzz("daemon toml", 0x70_1A_C0_F1, Duration::from_secs(10), move |rng| {
        let mut log = Vec::new();
        let base = rng.pick(&bases).clone();
        let mut lines: Vec<String> = base.lines().map(str::to_string).collect();
        for _ in 0..1 + rng.below(3) {
            let n = lines.len();
            match rng.below(8) {
                0..=2 => {
                    // A `key = value` line gets a hostile value.
                    let candidates: Vec<usize> = (0..n).filter(|&i| lines[i].contains(" = ") && !lines[i].starts_with('#')).collect();
                    if candidates.is_empty() {
                        continue;
                    }
                    let i = *rng.pick(&candidates);
                    let key = lines[i].split(" = ").next().unwrap().to_string();
                    let value = rng.pick(HOSTILE_TOML_VALUES);
                    log.push(format!("{key} = {value}"));
                    lines[i] = format!("{key} = {value}");
                }
                3 if n > 0 => {
                    let i = rng.below(n);
                    log.push(format!("delete line {i}"));
                    lines.remove(i);
                }
                4 if n > 0 => {
                    let i = rng.below(n);
                    let at = rng.below(n + 1);
                    log.push(format!("line {i} copied to {at}"));
                    let copy = lines[i].clone();
                    lines.insert(at, copy);
                }
                5 => {
                    let header = rng.pick(&["[[streams]]", "[streams.output]", "[model]", "[rtsp]", "[nope]", "[[model]]", "streams = []", "[streams]"]);
                    let at = rng.below(n + 1);
                    log.push(format!("{header} at line {at}"));
                    lines.insert(at, header.to_string());
                }
                _ => {
                    let mut bytes = lines.join("\n").into_bytes();
                    mutate_bytes(rng, &mut bytes, &mut log);
                    lines = String::from_utf8_lossy(&bytes).lines().map(str::to_string).collect();
                }
            }
        }
        let text = lines.join("\n");
        // Some cases also go the way `check-config FILE` does: from a file, under
        // hostile ROADSEG__* environment overrides.
        let via_file = rng.chance(8);
        let mut env = BTreeMap::new();
        if via_file {
            for _ in 0..rng.below(3) {
                let key = *rng.pick(ENV_KEYS);
                let value = rng.pick(HOSTILE_TOML_VALUES).trim_matches('"').to_string();
                log.push(format!("env {key}={value}"));
                env.insert(key.to_string(), value);
            }
        }
        let input = note(format!("toml edits {log:?} on {} bytes", text.len()));
        let guard_secret = secret_only_in_secret_places(&text);
        let leak = |what: &str, shown: &str| (guard_secret && shown.contains(SECRET)).then(|| format!("{what} shows the secret: {shown}"));
        if via_file {
            std::fs::write(&file, &text).unwrap();
            let sources = Sources { system: None, file: Some(file.clone()), env: Some(env) };
            let shown = match check_sources(&sources) {
                Ok(summary) => summary.to_string(),
                Err(e) => e.to_string(),
            };
            if let Some(v) = check_message("check_sources", &shown, false).or_else(|| leak("check-config", &shown)) {
                return (input, Some(v));
            }
        }
        let violation = match DaemonConfig::from_toml_str(&text, "fuzz.toml") {
            Err(e) => {
                let e = e.to_string();
                check_message("load", &e, false).or_else(|| leak("load error", &e))
            }
            Ok(cfg) => {
                let _ = cfg.warnings();
                let _ = cfg.validate_model_path();
                let _ = plan_reload(&reference, &cfg);
                for s in &cfg.streams {
                    let _ = (s.is_live(), s.temporal(), s.source());
                    for t in [SystemTime::UNIX_EPOCH, SystemTime::now(), SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 40)] {
                        let o = &s.output;
                        let _ = (o.file_path(&s.name, t), o.segment_location(&s.name, t), o.segment_path(&s.name, t, u32::MAX));
                        let _ = (o.stats_path(&s.name, t), o.rtsp_mount(&s.name));
                    }
                }
                match cfg.validate() {
                    Err(e) => {
                        let e = e.to_string();
                        check_message("validate", &e, false).or_else(|| leak("validation error", &e))
                    }
                    Ok(()) => {
                        accepted();
                        let warnings = cfg.warnings();
                        let summary = Summary { layers: "fuzz".into(), config: cfg, warnings, cpu_load: None, model_origin: None }.to_string();
                        leak("check-config summary", &summary)
                    }
                }
            }
        };
        (input, violation)
    });
}

/// Environment overrides tried with the file layer.
const ENV_KEYS: &[&str] = &[
    "ROADSEG__WORKERS__COUNT", "ROADSEG__MODEL__WIDTH", "ROADSEG__MODEL__DEVICE", "ROADSEG__MODEL__ROAD_CLASSES",
    "ROADSEG__MODEL__PRECISION", "ROADSEG__RTSP__LISTEN", "ROADSEG__RTSP__PASSWORD", "ROADSEG__RTSP__ALLOW_ANONYMOUS",
    "ROADSEG__METRICS__LISTEN", "ROADSEG__DAEMON__SHUTDOWN_TIMEOUT_S", "ROADSEG__STREAMS", "ROADSEG__NOPE__X", "ROADSEG__",
];

// ---------------------------------------------------------------- (d) stream URIs

const SEED_URIS: &[&str] = &[
    "rtsp://alice:s3cret-pass@127.0.0.1:554/Streaming/Channels/101?transport=tcp",
    "rtsps://alice:s3cret-pass@[2001:db8::1]:322/live#frag",
    "http://alice:s3cret-pass@cam.example/video.mjpg",
    "https://cam.example:8443/hls/index.m3u8?token=abc",
    "rtsp://cam.example/stream1",
    "file:///videos/clip.mp4",
    "file://localhost/videos/a%20b.mp4",
    "v4l2:///dev/video0",
    "test://smpte?width=1280&height=720&fps=30000/1001&num-buffers=10",
    "test://ball",
    "clip.mp4",
];

const URI_BITS: &[&str] = &[
    ":", "@", "/", "//", "?", "#", "&", "=", "[", "]", "%", "%2F", "%40", "%3A", " ", "\t", "\0", "é", "中", "🚗", "..", "\\",
    "://", "rtsp://", "file://", "test://", ":0", ":65536", ":-1", "@@", "?width=0", "&fps=0/0", "&fps=1e309", "&height=99999999999",
    "{", "}", "!", "\"", "'", "$(reboot)", "! filesink location=/tmp/x", "alice:s3cret-pass@",
];

/// The password a URI carries, found independently of the code under test:
/// the authority is up to the first `/`, `?` or `#`; the user info before its last `@`.
fn uri_password(uri: &str) -> Option<&str> {
    let rest = uri.split_once("://")?.1;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let userinfo = authority.rsplit_once('@')?.0;
    Some(userinfo.split_once(':')?.1)
}

#[test]
fn hostile_stream_uris_are_rejected_cleanly() {
    // Rule: a mutated stream URI parses or fails with a clear error in both URI checkers; never a panic or hang, and a password in it never appears in what they show.
    fuzz("stream uri", 0x0051_7E_A0, Duration::from_secs(5), |rng| {
        let mut log = Vec::new();
        let mut uri = rng.pick(SEED_URIS).to_string();
        for _ in 0..1 + rng.below(4) {
            let chars: Vec<char> = uri.chars().collect();
            let n = chars.len();
            let at = rng.below(n + 1);
            match rng.below(6) {
                0 | 1 => {
                    let bit = rng.pick(URI_BITS);
                    log.push(format!("insert {bit:?} at {at}"));
                    uri = chars[..at].iter().chain(bit.chars().collect::<Vec<_>>().iter()).chain(&chars[at..]).collect();
                }
                2 if n > 0 => {
                    let end = (at + 1 + rng.below(8)).min(n);
                    log.push(format!("delete {at}..{end}"));
                    uri = chars[..at.min(end)].iter().chain(&chars[end..]).collect();
                }
                3 => {
                    log.push(format!("truncate at {at}"));
                    uri = chars[..at].iter().collect();
                }
                4 if n > 0 => {
                    let i = rng.below(n);
                    let c = *rng.pick(&[':', '@', '/', '?', '#', '[', ']', '%', 'A', '0', ' ', 'é']);
                    log.push(format!("char {i} -> {c:?}"));
                    let mut chars = chars;
                    chars[i] = c;
                    uri = chars.into_iter().collect();
                }
                _ => {
                    let times = 1 + rng.below(300);
                    log.push(format!("repeat {:?} x{times}", rng.pick(URI_BITS)));
                    let bit = rng.pick(URI_BITS).repeat(times);
                    uri = chars[..at].iter().collect::<String>() + &bit + &chars[at..].iter().collect::<String>();
                }
            }
        }
        let input = note(shorten(&uri));
        // The secret must be masked wherever it is the URI's password and appears nowhere else.
        let guarded = uri.matches(SECRET).count() == 1 && uri_password(&uri).is_some_and(|p| p.contains(SECRET));
        let leak = |what: &str, shown: &str| (guarded && shown.contains(SECRET)).then(|| format!("{what} shows the password: {shown}"));

        let mut violation = leak("SourceUri::redacted", &SourceUri::redacted(&uri));
        match SourceUri::parse(&uri) {
            Ok(parsed) => {
                accepted();
                let _ = (parsed.host(), parsed.query_value("width"));
                violation = violation.or_else(|| leak("SourceUri::host", parsed.host()));
            }
            Err(e) => {
                let e = e.to_string();
                violation = violation.or_else(|| check_message("parse", &e, true)).or_else(|| leak("parse error", &e));
            }
        }
        let stream = StreamConfig::new("fuzz", &uri);
        let _ = (stream.is_live(), stream.temporal());
        for live in [false, true] {
            let settings = SourceSettings { live, ..SourceSettings::new(uri.clone()) };
            if let Err(e) = describe(&settings) {
                let e = e.to_string();
                violation = violation.or_else(|| check_message("source plan", &e, false)).or_else(|| leak("source error", &e));
            }
        }
        (input, violation)
    });
}

#[test]
fn a_header_claiming_an_exabyte_tensor_is_rejected_before_allocating() {
    // Rule: a safetensors header whose offsets and shape agree on a 2^60-byte tensor fails as a bad file, without allocating it.
    let good = common::repo().join(GOOD);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(good.join("config.json"), tmp.path().join("config.json")).unwrap();
    let header = json!({
        "segformer.encoder.patch_embeddings.0.proj.weight": {"dtype": "F32", "shape": [1u64 << 29, 1u64 << 29], "data_offsets": [0, 1u64 << 60]}
    })
    .to_string();
    std::fs::write(tmp.path().join("model.safetensors"), assemble(&header, &[0u8; 64], None)).unwrap();
    let before = LARGEST.load(Ordering::Relaxed);
    let err = load_checkpoint(tmp.path(), &CpuBackend::new()).unwrap_err();
    assert!(err.contains("model.safetensors") && err.contains("bad safetensors file"), "{err}");
    assert!(LARGEST.load(Ordering::Relaxed) <= before.max(ALLOC_LIMIT), "allocated {} bytes", LARGEST.load(Ordering::Relaxed));
}
