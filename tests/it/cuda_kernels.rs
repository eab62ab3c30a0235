//! Rule: every CUDA kernel in kernels/ compiles with NVRTC for Ampere (sm_80)
//! and Hopper (sm_90), and exports each entry point the backend launches with
//! the parameter count its launch passes. Needs only libnvrtc (no GPU); skips
//! with a message when it is absent.

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
    ("dwconv3x3_gelu", 7),
    ("dwconv3x3_gelu_tiled", 7),
    ("resize_bilinear", 8),
    ("decode_tail", 18),
    ("attention_simple", 8),
    ("preprocess", 8),
    ("postprocess", 13),
];
const FLASH_ENTRIES: &[(&str, usize)] = &[("flash_attention_hd32", 7), ("flash_attention_hd64", 7)];

fn nvrtc_or_skip() -> bool {
    if nvrtc_present() {
        eprintln!("NVRTC {:?}", nvrtc_version());
        true
    } else {
        eprintln!(
            "SKIP: libnvrtc is not loadable (install the nvidia-cuda-nvrtc-cu12 wheel and put its lib/ on LD_LIBRARY_PATH, as .ci/run does)"
        );
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
