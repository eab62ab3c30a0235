//! Rule: a broken model folder gives a one-line error naming the file or
//! tensor at fault, never a panic, both from the library and from the CLI.


use std::path::Path;

use crate::common::*;
use roadseg::backend::cpu::CpuBackend;
use roadseg::checkpoint::Checkpoint;
use roadseg::model::SegformerWeights;
use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

const GOOD: &str = "tests/data/three-stage-fp16-161x97";

fn load_error(dir: &Path) -> String {
    let backend = CpuBackend::new();
    let err = match Checkpoint::open(dir) {
        Err(e) => e.to_string(),
        Ok(mut ckpt) => match SegformerWeights::load(&mut ckpt, &backend) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{} loaded although it is broken", dir.display()),
        },
    };
    assert!(!err.contains('\n'), "error is one line: {err}");
    err
}

/// A copy of the good checkpoint with its tensors passed through `edit`.
fn rewrite(dir: &Path, edit: impl FnOnce(&mut Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>)) {
    copy_checkpoint(&repo().join(GOOD), dir);
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<_> =
        st.tensors().into_iter().map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec())).collect();
    edit(&mut tensors);
    let views: Vec<(String, TensorView<'_>)> =
        tensors.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    std::fs::write(dir.join("model.safetensors"), safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn truncated_safetensors_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    copy_checkpoint(&repo().join(GOOD), tmp.path());
    let path = tmp.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1000]).unwrap();
    let err = load_error(tmp.path());
    assert!(err.contains("model.safetensors") && err.contains("truncated"), "{err}");
}

#[test]
fn garbage_header_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    copy_checkpoint(&repo().join(GOOD), tmp.path());
    std::fs::write(tmp.path().join("model.safetensors"), b"this is not a safetensors file at all").unwrap();
    let err = load_error(tmp.path());
    assert!(err.contains("bad safetensors file"), "{err}");
}

#[test]
fn missing_tensor_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = "segformer.encoder.block.1.0.mlp.dense2.weight";
    rewrite(tmp.path(), |t| t.retain(|(n, ..)| n != victim));
    let err = load_error(tmp.path());
    assert!(err.contains("missing tensor") && err.contains(victim), "{err}");
}

#[test]
fn wrong_shape_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = "decode_head.classifier.weight";
    rewrite(tmp.path(), |t| {
        let entry = t.iter_mut().find(|(n, ..)| n == victim).unwrap();
        // [3, 32, 1, 1] -> [2, 32, 1, 1]: one class fewer than config.json says.
        entry.2[0] -= 1;
        let keep = entry.2.iter().product::<usize>() * 2;
        entry.3.truncate(keep);
    });
    let err = load_error(tmp.path());
    assert!(err.contains(victim) && err.contains("shape"), "{err}");
}

#[test]
fn unsupported_dtype_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = "segformer.encoder.layer_norm.0.bias";
    rewrite(tmp.path(), |t| {
        let entry = t.iter_mut().find(|(n, ..)| n == victim).unwrap();
        entry.1 = safetensors::Dtype::I16;
    });
    let err = load_error(tmp.path());
    assert!(err.contains(victim) && err.contains("I16"), "{err}");
}

#[test]
fn weights_of_a_deeper_model_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    rewrite(tmp.path(), |t| {
        // An extra block in stage 0 that config.json does not mention.
        let extra: Vec<_> = t
            .iter()
            .filter(|(n, ..)| n.starts_with("segformer.encoder.block.0.0."))
            .map(|(n, d, s, b)| (n.replace("block.0.0.", "block.0.1."), *d, s.clone(), b.clone()))
            .collect();
        t.extend(extra);
    });
    let err = load_error(tmp.path());
    assert!(err.contains("segformer.encoder.block.0.1.") && err.contains("not used"), "{err}");
}

#[test]
fn bad_config_json_is_named() {
    let cases: [(&str, &str); 4] = [
        ("{ not json", "config.json"),
        (r#"{"hidden_sizes": [16, 32, 48], "depths": [1, 1, 1], "num_encoder_blocks": 3, "num_attention_heads": [1, 3, 2], "sr_ratios": [4,2,1], "patch_sizes": [7,3,3], "strides": [4,2,2], "mlp_ratios": [2,4,3]}"#, "not divisible"),
        (r#"{"depths": [1, 1]}"#, "depths has 2 entries"),
        (r#"{"hidden_act": "relu"}"#, "hidden_act"),
    ];
    for (text, needle) in cases {
        let tmp = tempfile::tempdir().unwrap();
        copy_checkpoint(&repo().join(GOOD), tmp.path());
        std::fs::write(tmp.path().join("config.json"), text).unwrap();
        let err = load_error(tmp.path());
        assert!(err.contains("config.json") && err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn missing_folder_is_named() {
    let err = load_error(Path::new("/nonexistent/model"));
    assert!(err.contains("/nonexistent/model/config.json"), "{err}");
}

#[test]
fn cli_reports_a_broken_model_in_one_line_without_panicking() {
    let tmp = tempfile::tempdir().unwrap();
    copy_checkpoint(&repo().join(GOOD), tmp.path());
    let path = tmp.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let model = tmp.path().to_str().unwrap();
    let (code, _, stderr) = roadseg(&["bench", "--model", model, "--device", "cpu", "--frames", "1", "--size", "64x64"]);
    assert_ne!(code, 0);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("roadseg: error:")).expect("an error line");
    assert!(line.contains("model.safetensors") && line.contains("truncated"), "{line}");
}
