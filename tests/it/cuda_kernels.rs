//! Rule: every CUDA kernel in kernels/ compiles with NVRTC for Ampere (sm_80)
//! and Hopper (sm_90), and exports each entry point the backend launches with
//! the parameter count its launch passes. Needs only libnvrtc (no GPU); skips
//! with a message when it is absent. Also runs every lane-by-lane kernel
//! emulation in tools/ (numpy; skips without it).

#![cfg(feature = "cuda")]

use roadseg::backend::cuda::kernels::{SOURCES, compile, translation_unit};
use roadseg::backend::cuda::probe::{nvrtc_present, nvrtc_version};

/// (entry point without its type suffix, parameters), as the launch sites in
/// src/backend/cuda pass them.
const ENTRIES: &[(&str, usize)] = &[
    ("add_assign", 3),
    ("relu", 2),
    ("from_f32", 3),
    ("to_f32", 3),
    ("layer_norm", 6),
    ("layer_norm_vec1", 6),
    ("layer_norm_vec2", 6),
    ("layer_norm_vec4", 6),
    ("im2col", 11),
    ("im2col_vec", 11),
    ("dwconv3x3_gelu", 7),
    ("dwconv3x3_gelu_tiled", 7),
    ("resize_bilinear", 8),
    ("decode_tail", 18),
    ("attention_simple", 8),
    ("preprocess", 9),
    ("postprocess", 13),
];
const FLASH_ENTRIES: &[(&str, usize)] = &[
    ("flash_attention_hd32", 7),
    ("flash_attention_hd64", 7),
    ("flash_split_hd32", 9),
    ("flash_split_hd64", 9),
    ("flash_split_combine", 6),
];
/// Entry points with no type suffix (they work on uint8 frames).
const UNTYPED_ENTRIES: &[(&str, usize)] = &[("annotate_frame", 8)];

fn nvrtc_or_skip() -> bool {
    if nvrtc_present() {
        eprintln!("NVRTC {:?}", nvrtc_version());
        true
    } else {
        roadseg::test_skip::skip("libnvrtc is not loadable (install the nvidia-cuda-nvrtc-cu12 wheel and put its lib/ on LD_LIBRARY_PATH: tools/install-test-deps.sh and tools/test-skips.sh do)");
        false
    }
}

/// Parameter count of `.entry name(` in PTX text, if the entry exists.
fn entry_params(ptx: &str, name: &str) -> Option<usize> {
    let start = ptx.find(&format!(".entry {name}("))?;
    let body = &ptx[start..];
    let end = body.find(')')?;
    Some(body[..end].matches(".param").count())
}

#[test]
fn every_kernel_file_compiles_for_sm80_and_sm90() {
    if !nvrtc_or_skip() {
        return;
    }
    for arch in ["sm_80", "sm_90"] {
        for (name, body) in SOURCES {
            let ptx = compile(&translation_unit(&[(name, body)]), arch).unwrap_or_else(|e| panic!("{name} for {arch}: {e}"));
            let text = ptx.to_src();
            assert!(text.contains(".entry"), "{name} for {arch}: no kernels in the PTX");
            eprintln!("{name} {arch}: {} bytes of PTX", text.len());
        }
    }
}

#[test]
fn the_module_exports_what_the_backend_launches() {
    if !nvrtc_or_skip() {
        return;
    }
    let ptx = compile(&translation_unit(SOURCES), "sm_90").expect("all kernels compile as one module").to_src();
    for suffix in ["f32", "f16", "bf16"] {
        let flash = if suffix == "f32" { &[][..] } else { FLASH_ENTRIES };
        for (entry, params) in ENTRIES.iter().chain(flash) {
            let name = format!("{entry}_{suffix}");
            let found = entry_params(&ptx, &name).unwrap_or_else(|| panic!("kernel {name} is not in the module"));
            assert_eq!(found, *params, "kernel {name}: {found} parameters, the launch passes {params}");
        }
    }
    for (name, params) in UNTYPED_ENTRIES {
        let found = entry_params(&ptx, name).unwrap_or_else(|| panic!("kernel {name} is not in the module"));
        assert_eq!(found, *params, "kernel {name}: {found} parameters, the launch passes {params}");
    }
}

#[test]
fn the_overlay_kernel_rounds_each_operation_as_the_cpu() {
    // Rule: annotate_frame's f32 arithmetic compiles, under the backend's --use_fast_math, to separately rounded multiplies and adds with no FMA, as Rust's has none; byte equality with the CPU annotator (tools/emulate_annotate.py) rests on it.
    if !nvrtc_or_skip() {
        return;
    }
    let overlay = SOURCES.iter().find(|(name, _)| *name == "overlay.cu").expect("overlay.cu is a kernel source");
    for arch in ["sm_80", "sm_90"] {
        let ptx = compile(&translation_unit(&[*overlay]), arch).expect("overlay.cu compiles").to_src();
        let start = ptx.find(".entry annotate_frame(").expect("annotate_frame is in the PTX");
        let body = &ptx[start + 1..];
        let body = &body[..body.find(".entry").unwrap_or(body.len())];
        assert!(body.contains("mul.rn") && body.contains("add.rn"), "{arch}: no rounded f32 arithmetic in annotate_frame");
        assert!(!body.contains("fma."), "{arch}: annotate_frame contracts into FMAs, which the CPU never does");
    }
}

#[test]
fn a_syntax_error_is_reported_with_file_and_line() {
    if !nvrtc_or_skip() {
        return;
    }
    let err = compile(&translation_unit(&[("broken.cu", "extern \"C\" __global__ void k() { this is not C; }")]), "sm_80")
        .err()
        .expect("must not compile");
    assert!(err.to_string().contains("broken.cu"), "{err}");
}

/// A python that has numpy: $ROADSEG_EMULATION_PYTHON, else the virtualenv
/// tools/install-nvrtc.sh makes, else python3.
fn python_with_numpy() -> Option<std::path::PathBuf> {
    let venv = std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache/roadseg/nvrtc-venv/bin/python"));
    let candidates = std::env::var_os("ROADSEG_EMULATION_PYTHON").map(Into::into).into_iter().chain(venv).chain(Some("python3".into()));
    candidates.into_iter().find(|py: &std::path::PathBuf| {
        std::process::Command::new(py).args(["-c", "import numpy"]).output().is_ok_and(|o| o.status.success())
    })
}

#[test]
fn every_kernel_emulation_matches_its_reference() {
    // Rule: each tools/emulate_*.py, which replays a kernel's thread and fragment arithmetic in numpy, agrees with its plain reference (exit 0); skips without numpy.
    let Some(python) = python_with_numpy() else {
        roadseg::test_skip::skip("no python with numpy (tools/install-nvrtc.sh installs one)");
        return;
    };
    let tools = crate::common::repo().join("tools");
    let mut scripts: Vec<_> = std::fs::read_dir(&tools).unwrap().flatten().map(|e| e.path()).filter(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("emulate_") && n.ends_with(".py"))
    }).collect();
    scripts.sort();
    assert!(scripts.len() >= 4, "emulations found: {scripts:?}");
    for script in scripts {
        let out = std::process::Command::new(&python).arg(&script).output().expect("python runs");
        let tail: String = String::from_utf8_lossy(&out.stdout).lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        eprintln!("{}: {tail}", script.display());
        assert!(out.status.success(), "{} failed:\n{}\n{}", script.display(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
}
