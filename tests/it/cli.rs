//! Rule: the engine-only subcommands (infer, eval, bench) do what their help
//! says, with outputs at the input's own resolution and errors that name the problem.


use crate::common::*;
use image::{Rgb, RgbImage};

const MODEL: &str = "tests/data/odd-bf16-203x141";

fn write_test_images(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, w, h) in [("a.png", 160u32, 90u32), ("b.png", 120, 100)] {
        let img = RgbImage::from_fn(w, h, |x, y| Rgb([(x * 255 / w) as u8, (y * 255 / h) as u8, ((x + y) % 200) as u8]));
        img.save(dir.join(name)).unwrap();
    }
}

#[test]
fn infer_folder_writes_class_maps_and_overlays_at_image_size() {
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    write_test_images(&images);
    let classes = tmp.path().join("classes");
    let overlays = tmp.path().join("overlays");
    let (code, stdout, stderr) = roadseg(&[
        "infer", "--model", MODEL, "--device", "cpu", "--image", images.to_str().unwrap(), "--size", "203x141",
        "--classes-out", classes.to_str().unwrap(), "--overlay-out", overlays.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 2, "one line per image: {stdout}");
    for (name, w, h) in [("a.png", 160, 90), ("b.png", 120, 100)] {
        let c = image::open(classes.join(name)).unwrap().to_luma8();
        assert_eq!(c.dimensions(), (w, h));
        assert!(c.pixels().all(|p| p.0[0] < 7 || p.0[0] == 255), "class indices or unknown");
        assert_eq!(image::open(overlays.join(name)).unwrap().to_rgb8().dimensions(), (w, h));
    }
}

#[test]
fn infer_folder_skips_an_unreadable_image_names_it_and_writes_the_rest() {
    // Rule: in a folder, an image that cannot be read is named and skipped, every other image still gets its outputs, and the run exits non-zero listing what was skipped; a single unreadable image is an error of its own.
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    write_test_images(&images);
    std::fs::write(images.join("0-broken.jpg"), "not a picture").unwrap();
    let overlays = tmp.path().join("overlays");
    let (code, stdout, stderr) = roadseg(&[
        "infer", "--model", MODEL, "--device", "cpu", "--image", images.to_str().unwrap(), "--size", "203x141",
        "--overlay-out", overlays.to_str().unwrap(),
    ]);
    assert_ne!(code, 0, "a skipped image must show in the exit status: {stdout}");
    assert_eq!(stdout.lines().count(), 2, "the two readable images, the first one skipped: {stdout}");
    assert!(overlays.join("a.png").is_file() && overlays.join("b.png").is_file(), "{stderr}");
    assert!(!overlays.join("0-broken.png").exists());
    assert!(stderr.contains("0-broken.jpg") && stderr.contains("1 of 3 images"), "{stderr}");
    let (code, _, stderr) =
        roadseg(&["infer", "--model", MODEL, "--device", "cpu", "--image", images.join("0-broken.jpg").to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(stderr.contains("cannot read image") && stderr.contains("0-broken.jpg"), "{stderr}");
}

#[test]
fn infer_pixel_values_writes_reference_logits() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("logits.npy");
    let pv = format!("{MODEL}/pixel_values.npy");
    let (code, _, stderr) =
        roadseg(&["infer", "--model", MODEL, "--device", "cpu", "--pixel-values", &pv, "--logits-out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let ours = roadseg::npy::read_f32(&out).unwrap();
    let reference = roadseg::npy::read_f32(repo().join(MODEL).join("logits.npy")).unwrap();
    assert_eq!(ours.shape, reference.shape);
    assert!(diff(&ours.data, &reference.data).0 < 1e-3 * abs_max(&reference.data));
}

#[test]
fn eval_scores_a_model_against_its_own_predictions_as_perfect() {
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    write_test_images(&images);
    let labels = tmp.path().join("labels");
    let (code, _, stderr) = roadseg(&[
        "infer", "--model", MODEL, "--device", "cpu", "--image", images.to_str().unwrap(), "--size", "203x141",
        "--threshold", "0", "--classes-out", labels.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = roadseg(&[
        "eval", "--model", MODEL, "--device", "cpu", "--images", images.to_str().unwrap(), "--labels",
        labels.to_str().unwrap(), "--size", "203x141", "--threshold", "0", "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(json["miou"].as_f64(), Some(1.0), "{stdout}");
    assert_eq!(json["images"].as_u64(), Some(2));
}

#[test]
fn eval_road_labels_and_masks_score_the_same_pixels_by_the_same_code() {
    // Rule: --road-labels scores road against any label set (here the model's own class maps, road = class 0), with per-frame counts; --masks scores road masks made elsewhere by that same code (the model's own road masks score as the model does; their complement scores 0), and --masks without a road-only truth is refused by name. The model's road is scored as painted: a pixel under --threshold is unknown, not road.
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    write_test_images(&images);
    let labels = tmp.path().join("labels");
    let (code, _, stderr) = roadseg(&[
        "infer", "--model", MODEL, "--device", "cpu", "--image", images.to_str().unwrap(), "--size", "203x141",
        "--threshold", "0", "--classes-out", labels.to_str().unwrap(), "--connected-road", "off",
    ]);
    assert_eq!(code, 0, "{stderr}");
    // Road masks from the class maps (class 0 = road for this fixture's first label), and their complement.
    let (masks, inverse) = (tmp.path().join("masks"), tmp.path().join("inverse"));
    std::fs::create_dir_all(&masks).unwrap();
    std::fs::create_dir_all(&inverse).unwrap();
    for name in ["a.png", "b.png"] {
        let c = image::open(labels.join(name)).unwrap().to_luma8();
        let m = image::GrayImage::from_fn(c.width(), c.height(), |x, y| image::Luma([if c.get_pixel(x, y).0[0] == 0 { 255 } else { 0 }]));
        let inv = image::GrayImage::from_fn(c.width(), c.height(), |x, y| image::Luma([255 - m.get_pixel(x, y).0[0]]));
        m.save(masks.join(name)).unwrap();
        inv.save(inverse.join(name)).unwrap();
    }
    let eval = |extra: &[&str]| {
        let mut args = vec!["eval", "--model", MODEL, "--device", "cpu", "--images", images.to_str().unwrap(), "--labels",
            labels.to_str().unwrap(), "--road-labels", "0", "--size", "203x141", "--connected-road", "off", "--json"];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = roadseg(&args);
        assert_eq!(code, 0, "{stderr}");
        serde_json::from_str::<serde_json::Value>(stdout.lines().last().unwrap()).unwrap()
    };
    let road_class = eval(&["--road-class", "LABEL_0", "--threshold", "0"]);
    // Label 4 is the class this model paints most: sure of none of it at 1, it paints none as road.
    let painted = |threshold: &str| {
        let (code, stdout, stderr) = roadseg(&["eval", "--model", MODEL, "--device", "cpu", "--images", images.to_str().unwrap(),
            "--labels", labels.to_str().unwrap(), "--road-labels", "4", "--road-class", "LABEL_4", "--size", "203x141",
            "--connected-road", "off", "--threshold", threshold, "--json"]);
        assert_eq!(code, 0, "{stderr}");
        serde_json::from_str::<serde_json::Value>(stdout.lines().last().unwrap()).unwrap()
    };
    let (argmax, all_unknown) = (painted("0"), painted("1"));
    assert!(argmax["frames"]["a.png"]["union"].as_u64().unwrap() > 0, "{argmax}");
    assert_eq!(argmax["road_iou"].as_f64(), Some(1.0), "{argmax}");
    assert_eq!(all_unknown["road_iou"].as_f64(), Some(0.0), "{all_unknown}");
    let from_masks = eval(&["--masks", masks.to_str().unwrap()]);
    let from_inverse = eval(&["--masks", inverse.to_str().unwrap()]);
    assert_eq!(from_masks["road_iou"].as_f64(), Some(1.0), "{from_masks}");
    assert_eq!(from_inverse["road_iou"].as_f64(), Some(0.0), "{from_inverse}");
    assert_eq!(from_masks["frames"]["a.png"]["union"], from_masks["frames"]["a.png"]["intersection"]);
    assert_eq!(road_class["images"].as_u64(), Some(2));
    assert_eq!(road_class["road_iou"].as_f64(), Some(1.0), "the model against its own class maps: {road_class}");
    let (code, _, stderr) = roadseg(&[
        "eval", "--device", "cpu", "--images", images.to_str().unwrap(), "--labels", labels.to_str().unwrap(), "--masks",
        masks.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--road-labels"), "{stderr}");
}

#[test]
fn eval_names_a_missing_label_map() {
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    write_test_images(&images);
    let labels = tmp.path().join("labels");
    std::fs::create_dir_all(&labels).unwrap();
    let (code, _, stderr) = roadseg(&[
        "eval", "--model", MODEL, "--device", "cpu", "--images", images.to_str().unwrap(), "--labels", labels.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("no label map") && stderr.contains("a.png"), "{stderr}");
}

#[test]
fn bench_prints_one_json_line_with_timings_and_memory() {
    let (code, stdout, stderr) =
        roadseg(&["bench", "--model", MODEL, "--device", "cpu", "--size", "203x141", "--frames", "12", "--precision", "fp16"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("fp16 is not available on the CPU"), "fp16 on CPU warns: {stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    for key in ["device", "precision", "size", "frames", "median_ms", "p90_ms", "fps", "rss_mib_frame10", "rss_mib_end"] {
        assert!(!json[key].is_null(), "{key} missing in {stdout}");
    }
    assert_eq!(json["device"], "cpu");
    assert_eq!(json["precision"], "f32");
    assert_eq!(json["size"], serde_json::json!([203, 141]));
    assert!(json["median_ms"].as_f64().unwrap() > 0.0);
    // The host's cores per frame: on the CPU backend the model itself, so never 0.
    assert!(json["host_cpu_ms_per_frame"].as_f64().is_some_and(|ms| ms > 0.0), "{stdout}");
}

#[test]
fn bench_batch_prints_one_json_line_counting_every_frame() {
    // Rule: bench --batch N runs N copies of the frame per batched forward, rounds --frames up to whole batches and reports fps over every frame in its one JSON line; a batch outside 1..=16 is refused with a message naming --batch.
    let args = ["bench", "--model", MODEL, "--device", "cpu", "--size", "203x141", "--frames", "7", "--warmup", "1", "--batch", "3"];
    let (code, stdout, stderr) = roadseg(&args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "one JSON line: {stdout}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(json["batch"], 3);
    assert_eq!(json["frames"], 9, "7 frames round up to 3 batches of 3");
    assert!(json["fps"].as_f64().unwrap() > 0.0 && json["median_ms"].as_f64().unwrap() > 0.0, "{stdout}");
    for bad in ["0", "17"] {
        let (code, stdout, stderr) = roadseg(&["bench", "--model", MODEL, "--device", "cpu", "--size", "203x141", "--batch", bad]);
        assert_ne!(code, 0, "--batch {bad} accepted: {stdout}");
        assert!(stderr.contains("--batch"), "{stderr}");
    }
}

#[test]
fn bench_temporal_reports_a_workers_frame_by_phase() {
    // Rule: bench --temporal runs a stream worker's whole path and reports the host's part (temporal_median_ms) and each phase's median (observe, to_logits, filter, after_filter), which add up to no more than the frame; it refuses --batch.
    let args = ["bench", "--model", MODEL, "--device", "cpu", "--size", "203x141", "--frame", "320x200", "--frames", "6", "--warmup", "1", "--temporal"];
    let (code, stdout, stderr) = roadseg(&args);
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let phases = &json["worker_phases_median_ms"];
    let phase = |name: &str| phases[name].as_f64().unwrap_or_else(|| panic!("{name} missing in {stdout}"));
    let sum: f64 = ["observe", "to_logits", "filter", "after_filter"].iter().map(|p| phase(p)).sum();
    assert!(phase("to_logits") > 0.0, "the model runs before the filter: {stdout}");
    assert!(phase("observe") > 0.0 && phase("filter") >= 0.0, "{stdout}");
    // Medians of parts need not add up exactly; within the p90 of the whole they must.
    assert!(sum <= json["p90_ms"].as_f64().unwrap() * 1.05 + 0.1, "phases {sum} ms vs frame p90 in {stdout}");
    assert!(json["temporal_median_ms"].as_f64().unwrap() > 0.0, "{stdout}");
    let (code, _, stderr) = roadseg(&["bench", "--model", MODEL, "--device", "cpu", "--size", "203x141", "--temporal", "--batch", "2"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--temporal"), "{stderr}");
    // Without --temporal there are no phases.
    let (_, stdout, _) = roadseg(&["bench", "--model", MODEL, "--device", "cpu", "--size", "203x141", "--frames", "2", "--warmup", "0"]);
    assert!(stdout.contains("\"worker_phases_median_ms\":null"), "{stdout}");
}

#[test]
fn bad_arguments_are_explained() {
    let (code, _, stderr) = roadseg(&["infer", "--model", MODEL, "--image", "/nonexistent.png", "--device", "cpu"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("/nonexistent.png"), "{stderr}");
    let (code, _, stderr) = roadseg(&["bench", "--model", MODEL, "--size", "100by50"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("WxH"), "{stderr}");
}

#[cfg(feature = "cuda")]
#[test]
fn device_cuda_without_a_driver_fails_with_a_clear_message() {
    if let Ok(info) = roadseg::backend::cuda::probe::probe() {
        roadseg::test_skip::skip(&format!("this machine has CUDA ({} GPU(s)); the no-driver error cannot be seen here", info.devices.len()));
        return;
    }
    let (code, _, err) = roadseg(&["bench", "--model", "models/roadseg-camvid", "--device", "cuda", "--frames", "1"]);
    assert_ne!(code, 0);
    assert!(err.contains("--device cuda") && err.contains("CUDA is not usable here") && err.contains("--device cpu"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // auto falls back to the CPU and says why.
    let (code, out, err) = roadseg(&["bench", "--model", "models/roadseg-camvid", "--device", "auto", "--frames", "1", "--warmup", "0", "--size", "256x160", "--frame", "320x200"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("running on the CPU"), "the fallback is announced: {err}");
    assert!(out.contains("cpu"), "{out}");
}

#[test]
fn json_logs_and_the_model_found_from_any_directory() {
    // Rule: --log-format json (or ROADSEG_LOG_FORMAT=json) writes one JSON object per log line; RUST_LOG sets levels when ROADSEG_LOG does not; $ROADSEG_MODEL stands in for the bundled model when run from elsewhere.
    let tmp = tempfile::tempdir().unwrap();
    write_test_images(tmp.path());
    let image = tmp.path().join("a.png");
    let run = |envs: &[(&str, &str)], args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_roadseg"));
        cmd.current_dir(tmp.path()).env_remove("ROADSEG_LOG").env_remove("RUST_LOG").env_remove("ROADSEG_LOG_FORMAT");
        cmd.args(args).args(["infer", "--device", "cpu", "--image", image.to_str().unwrap(), "--size", "203x141"]);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let model = repo().join(MODEL);
    let model = model.to_str().unwrap();
    for (envs, args) in [(vec![("ROADSEG_MODEL", model)], vec!["--log-format", "json"]), (vec![("ROADSEG_MODEL", model), ("ROADSEG_LOG_FORMAT", "json")], vec![])] {
        let out = run(&envs, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.lines().count() >= 1, "some log lines: {stderr}");
        for line in stderr.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            assert!(v["level"].is_string() && v["message"].is_string(), "{line}");
        }
        assert!(stderr.contains("\"message\":\"model loaded\""), "{stderr}");
    }
    let quiet = run(&[("ROADSEG_MODEL", model), ("RUST_LOG", "error")], &[]);
    assert!(quiet.status.success());
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("model loaded"), "RUST_LOG=error honoured");
    let missing = run(&[("ROADSEG_MODEL", "/nonexistent/model")], &[]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/model"), "the error names $ROADSEG_MODEL's folder");
}

#[test]
fn a_source_build_finds_its_checkouts_model_from_any_directory() {
    // Rule: with no --model, no [model] path and no $ROADSEG_MODEL, a source build run from another directory finds the checkout's models/roadseg-camvid (infer and check-config).
    let tmp = tempfile::tempdir().unwrap();
    write_test_images(tmp.path());
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_roadseg"));
        cmd.current_dir(tmp.path()).env_remove("ROADSEG_MODEL").env("ROADSEG_LOG", "warn").args(args);
        run_with_timeout(&mut cmd, std::time::Duration::from_secs(60))
    };
    let (ok, _, stderr) = run(&["infer", "--device", "cpu", "--image", "a.png", "--size", "256x160", "--classes-out", "a-classes.png"]);
    assert!(ok, "{stderr}");
    assert!(tmp.path().join("a-classes.png").is_file());
    let config = tmp.path().join("roadseg.toml");
    std::fs::write(&config, "[[streams]]\nname = \"cam\"\nuri = \"test://\"\n[streams.output]\nstats = \"cam.jsonl\"\n").unwrap();
    let (ok, stdout, stderr) = run(&["check-config", config.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let checkout_model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/roadseg-camvid");
    assert!(stdout.contains(&format!("model: {} (", checkout_model.display())), "{stdout}");
}

#[test]
fn every_shipped_config_passes_check_config_from_a_source_checkout() {
    // Rule: each config in config/ passes `roadseg check-config` (exit 0) run from the checkout and from another directory: the model they name is found by the CLI's model search, not by a path only one machine has.
    let tmp = tempfile::tempdir().unwrap();
    let configs: Vec<_> = std::fs::read_dir(repo().join("config")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "toml")).collect();
    assert!(configs.len() >= 2, "{configs:?}");
    for config in &configs {
        for dir in [repo(), tmp.path().to_path_buf()] {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_roadseg"));
            cmd.current_dir(&dir).env_remove("ROADSEG_MODEL").env("ROADSEG_LOG", "warn").arg("check-config").arg(config);
            let (ok, _, stderr) = run_with_timeout(&mut cmd, std::time::Duration::from_secs(60));
            assert!(ok, "check-config {} from {}: {stderr}", config.display(), dir.display());
        }
    }
}

#[test]
fn eval_road_polygons_scores_the_road_classes_inside_the_drawn_road() {
    // Rule: with --road-polygons, road IoU is (pixels of the road classes inside the drawn road) over the drawn road and the road classes outside it, on scored pixels only, and again with the drawn hood left out of the prediction (per frame in --json); missing frames and size mismatches are named.
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    write_test_images(&images);
    let classes = tmp.path().join("classes");
    let (code, _, stderr) = roadseg(&[
        "infer",
        "--model",
        MODEL,
        "--device",
        "cpu",
        "--image",
        images.to_str().unwrap(),
        "--size",
        "203x141",
        "--threshold",
        "0",
        "--classes-out",
        classes.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    // a.png is 160x90: the left half is road (band 1 px at 160 wide).
    let polygons = tmp.path().join("road.json");
    std::fs::write(
        &polygons,
        r#"{"frames": [{"name": "a.png", "size": [160, 90], "road": [[[0,0],[80,0],[80,90],[0,90]]], "hood": [[[0,60],[160,60],[160,90],[0,90]]]}]}"#,
    )
    .unwrap();
    let class_map = image::open(classes.join("a.png")).unwrap().to_luma8();
    let road_class = 4u8; // the class this model paints most of a.png with
    let (mut inter, mut union) = (0u64, 0u64);
    // The same with the hood (rows 60-89, pixel centres inside the drawn hood) never road.
    let (mut inter_hood_out, mut union_hood_out) = (0u64, 0u64);
    for (x, y, p) in class_map.enumerate_pixels() {
        let (cx, cy) = (x as f64 + 0.5, y as f64 + 0.5);
        // Scored: at least 1 px from every drawn edge (x = 0, 80; y = 0, 90 within the road's span).
        let near_edge =
            cx < 1.0 || (cx - 80.0).abs() < 1.0 || ((cy < 1.0 || cy > 89.0) && cx < 81.0);
        if near_edge {
            continue;
        }
        let (truth, pred) = (x < 80, p[0] == road_class);
        inter += (truth && pred) as u64;
        union += (truth || pred) as u64;
        let pred_hood_out = pred && y < 60;
        inter_hood_out += (truth && pred_hood_out) as u64;
        union_hood_out += (truth || pred_hood_out) as u64;
    }
    assert_ne!((inter, union), (inter_hood_out, union_hood_out), "the hood must cover some predicted road");
    let expected = inter as f64 / union as f64;
    assert!(
        expected > 0.2 && expected < 0.9,
        "a.png should be partly label_4 on both halves: {expected}"
    );
    let (code, stdout, stderr) = roadseg(&[
        "eval",
        "--model",
        MODEL,
        "--device",
        "cpu",
        "--images",
        images.to_str().unwrap(),
        "--road-polygons",
        polygons.to_str().unwrap(),
        "--road-class",
        "label_4",
        "--size",
        "203x141",
        "--threshold",
        "0",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(json["images"].as_u64(), Some(1), "{stdout}");
    let got = json["road_iou"].as_f64().unwrap();
    assert!(
        (got - expected).abs() < 1e-9,
        "road IoU {got}, expected {expected} ({stdout})"
    );
    let frame = &json["frames"]["a.png"];
    assert_eq!((frame["intersection"].as_u64(), frame["union"].as_u64()), (Some(inter), Some(union)), "{stdout}");
    let hood_out = &frame["hood_out"];
    assert_eq!(
        (hood_out["intersection"].as_u64(), hood_out["union"].as_u64()),
        (Some(inter_hood_out), Some(union_hood_out)),
        "{stdout}"
    );
    let pooled_hood_out = json["road_iou_hood_out"].as_f64().unwrap();
    assert!((pooled_hood_out - inter_hood_out as f64 / union_hood_out as f64).abs() < 1e-9, "{stdout}");

    // Bad polygon files fail, naming the frame and what is wrong with it.
    let refused = |frames_json: &str| {
        std::fs::write(&polygons, frames_json).unwrap();
        let (code, _, stderr) = roadseg(&[
            "eval",
            "--model",
            MODEL,
            "--device",
            "cpu",
            "--images",
            images.to_str().unwrap(),
            "--road-polygons",
            polygons.to_str().unwrap(),
        ]);
        assert_ne!(code, 0, "{frames_json} was accepted");
        stderr
    };
    let stderr = refused(r#"{"frames": [{"name": "c.png", "size": [160, 90], "road": [[[0,0],[80,0],[80,90]]]}]}"#);
    assert!(stderr.contains("c.png") && stderr.contains("stage"), "{stderr}");
    let stderr = refused(r#"{"frames": [{"name": "a.png", "size": [320, 180], "road": [[[0,0],[80,0],[80,90]]]}]}"#);
    assert!(stderr.contains("a.png is 160x90") && stderr.contains("[320, 180]"), "{stderr}");
}
