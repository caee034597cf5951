//! Image-and-text models (CLIP with both of its pooling rules, SigLIP) converted from random
//! checkpoints laid out as the published ones, against an independent NumPy reference
//! (scripts/image_reference.py: Pillow's preprocessing as transformers' slow processors call it,
//! float64 towers written from modeling_clip.py and modeling_siglip.py): image and text vectors
//! through the library, the command line and the server's Jina and Cohere routes (sent, and
//! fetched from a local http server with `--allow-image-urls`); each of the
//! reference's deliberate mistakes caught; bad images and wrong routes refused in one line.

#![cfg(feature = "embed-ort")]

mod common;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use common::server::Server;
use common::{assert_one_line_error, largest_difference, nornir, rows, s, unit};
use nornir_test_support::env_path;
use nornir_test_support::http::ImageHost;
use nornir_vector::{CallOptions, Device, Embedder, EmbedderOptions, ImageInput};
use serde_json::{Value, json};

/// Runs scripts/image_reference.py with `args`; its JSON.
fn reference(args: &[&str]) -> Value {
    common::reference_json("image_reference.py", args)
}

/// The images whose bytes every decoder reads alike (PNG, lossless WebP, GIF): their vectors
/// must equal the reference's. JPEG and lossy WebP decoders differ by a unit here and there
/// (libjpeg-turbo against the Rust decoder), measured separately.
fn lossless(name: &str) -> bool {
    name.ends_with(".png") || name.ends_with(".gif") || name.starts_with("lossless")
}

const TEXTS: [&str; 4] =
    ["a photo of a cat", "two dogs", "", "the quick brown fox jumps over the lazy dog again and again"];

fn cpu() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_ort_library(env_path("NORNIR_TEST_ORT_CPU"))
}

struct Family {
    source: PathBuf,
    converted: PathBuf,
    /// Extra arguments of the reference (SigLIP without the attention mask).
    extra: &'static [&'static str],
}

fn make(work: &Path, name: &'static str) -> Family {
    let source = work.join(name);
    reference(&["make", name, s(&source)]);
    let converted = work.join(format!("{name}-onnx"));
    let o = nornir(&["vector", "convert", "--model", s(&source), "--output", s(&converted), "--quiet"]);
    assert!(o.status.success(), "convert {name}: {}", common::stderr(&o));
    assert!(converted.join("text_model.onnx").is_file() && converted.join("vision_model.onnx").is_file());
    // SigLIP's published code pads to 64 and attends to the padding (big_vision, open_clip and the
    // fast tokenizer, which passes no mask); the slow tokenizer's mask is the reference's option.
    let extra: &[&str] = if name == "siglip" { &["--siglip-unmasked"] } else { &[] };
    Family { source, converted, extra }
}

fn reference_vectors(f: &Family, images: &[PathBuf], mistake: Option<&str>) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let mut args = vec!["embed", s(&f.source), "--images"];
    args.extend(images.iter().map(|p| s(p)));
    args.push("--texts");
    args.extend(TEXTS);
    args.extend(f.extra);
    if let Some(m) = mistake {
        args.extend(["--mistake", m]);
    }
    let r = reference(&args);
    (rows(&r["images"]), rows(&r["texts"]))
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn clip_and_siglip_match_the_reference_through_the_library_and_the_command_line() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let set = reference(&["images", s(&t.path().join("images"))]);
    let names: Vec<String> = serde_json::from_value(set["images"].clone()).expect("names");
    let all: Vec<PathBuf> = names.iter().map(|n| t.path().join("images").join(n)).collect();
    let exact: Vec<PathBuf> =
        all.iter().filter(|p| lossless(&p.file_name().unwrap_or_default().to_string_lossy())).cloned().collect();
    let decoded: Vec<PathBuf> = all.iter().filter(|p| !exact.contains(p)).cloned().collect();
    assert!(exact.len() >= 10 && decoded.len() >= 4, "{names:?}");
    let mut report = Vec::new();
    for name in ["clip", "clip-eos", "siglip"] {
        let f = make(t.path(), name);
        let (want_images, want_texts) = reference_vectors(&f, &exact, None);
        let e = Embedder::new(&f.converted, &cpu()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(e.takes_images() && e.image_settings().is_some(), "{name}");
        let raw = CallOptions::new().with_normalize(false);
        let inputs: Vec<ImageInput> = exact.iter().map(ImageInput::path).collect();
        let got_images: Vec<Vec<f32>> =
            e.embed_images_with(&inputs, &raw).expect("images").rows().map(<[f32]>::to_vec).collect();
        let got_texts: Vec<Vec<f32>> = e.embed_with(&TEXTS, &raw).expect("texts").rows().map(<[f32]>::to_vec).collect();
        let (di, dt) = (largest_difference(&got_images, &want_images), largest_difference(&got_texts, &want_texts));
        assert!(di < 1e-5 && dt < 1e-5, "{name}: images {di:e}, texts {dt:e}");
        // The same images as bytes, and one as decoded pixels, give the same rows.
        let bytes: Vec<ImageInput> = exact.iter().map(|p| ImageInput::bytes(std::fs::read(p).expect("read"))).collect();
        let again: Vec<Vec<f32>> =
            e.embed_images_with(&bytes, &raw).expect("bytes").rows().map(<[f32]>::to_vec).collect();
        assert_eq!(again, got_images, "{name}: bytes and paths");
        // Each mistake of the reference is far from nornir's vectors.
        for mistake in
            ["mean-std-swapped", "bilinear", "no-post-norm", "no-final-norm", "wrong-pooled-token", "no-causal-mask"]
        {
            if (name == "siglip") && matches!(mistake, "mean-std-swapped" | "no-causal-mask") {
                continue; // SigLIP's mean and std are both 0.5, and its text tower is not causal.
            }
            let (wi, wt) = reference_vectors(&f, &exact, Some(mistake));
            let caught = largest_difference(&got_images, &wi).max(largest_difference(&got_texts, &wt));
            assert!(caught > 1e-3, "{name}: the mistake {mistake} is not caught ({caught:e})");
        }
        // JPEG and lossy WebP: the decoders' own differences, measured.
        let (want_decoded, _) = reference_vectors(&f, &decoded, None);
        let inputs: Vec<ImageInput> = decoded.iter().map(ImageInput::path).collect();
        let got: Vec<Vec<f32>> =
            e.embed_images_with(&inputs, &raw).expect("jpeg").rows().map(<[f32]>::to_vec).collect();
        let cos = got.iter().zip(&want_decoded).map(|(g, w)| {
            let g: Vec<f64> = g.iter().map(|x| f64::from(*x)).collect();
            unit(&g).iter().zip(unit(w)).map(|(a, b)| a * b).sum::<f64>()
        });
        let worst_cos = cos.fold(1.0, f64::min);
        assert!(worst_cos > 0.99, "{name}: JPEG and WebP vectors are not the reference's ({worst_cos})");
        report.push(format!("{name}: lossless images {di:.1e}, texts {dt:.1e}, JPEG/WebP cosine >= {worst_cos:.6}"));
        // The command line: normalised rows, row i for line i.
        let list = t.path().join(format!("{name}.txt"));
        std::fs::write(&list, exact.iter().map(|p| s(p).to_owned()).collect::<Vec<_>>().join("\n") + "\n")
            .expect("list");
        let o = nornir(&["vector", "embed", "--model", s(&f.converted), "--images", s(&list), "--quiet"]);
        assert!(o.status.success(), "{name}: {}", common::stderr(&o));
        let lines: Vec<Vec<f32>> = String::from_utf8_lossy(&o.stdout).lines().map(common::embedding_of_line).collect();
        let want: Vec<Vec<f64>> = want_images.iter().map(|r| unit(r)).collect();
        let d = largest_difference(&lines, &want);
        assert!(d < 1e-5, "{name}: the command line's image rows differ by {d:e}");
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn the_server_answers_jina_and_cohere_image_requests_in_order() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let set = reference(&["images", s(&t.path().join("images"))]);
    let names: Vec<String> = serde_json::from_value(set["images"].clone()).expect("names");
    let pngs: Vec<PathBuf> =
        names.iter().filter(|n| n.ends_with(".png")).take(3).map(|n| t.path().join("images").join(n)).collect();
    let f = make(t.path(), "clip");
    let (want_images, want_texts) = reference_vectors(&f, &pngs, None);
    let server = Server::start_with(&f.converted, &[]);
    let b64 = |p: &Path| base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).expect("read"));
    // Jina: texts and images in one input, answered in order (a data URI and bare base64 alike).
    let input = json!([
        {"image": format!("data:image/png;base64,{}", b64(&pngs[0]))},
        {"text": TEXTS[0]},
        {"image": b64(&pngs[1])},
        TEXTS[1],
    ]);
    let (status, body) = server.post("/v1/embeddings", &json!({"model": "clip", "input": input}));
    assert_eq!(status, 200, "{body}");
    let got: Vec<Vec<f32>> = body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| serde_json::from_value(d["embedding"].clone()).expect("row"))
        .collect();
    let want = vec![unit(&want_images[0]), unit(&want_texts[0]), unit(&want_images[1]), unit(&want_texts[1])];
    assert!(largest_difference(&got, &want) < 1e-5, "{body}");
    // Cohere: images as data URIs, input_type "image", float and int8 types.
    let uris: Vec<String> = pngs.iter().map(|p| format!("data:image/png;base64,{}", b64(p))).collect();
    let req = json!({"model": "clip", "images": uris, "input_type": "image", "embedding_types": ["float", "int8"]});
    let (status, body) = server.post("/v2/embed", &req);
    assert_eq!(status, 200, "{body}");
    let got: Vec<Vec<f32>> = serde_json::from_value(body["embeddings"]["float"].clone()).expect("float rows");
    let want: Vec<Vec<f64>> = want_images.iter().map(|r| unit(r)).collect();
    assert!(largest_difference(&got, &want) < 1e-5, "{body}");
    assert_eq!(body["embeddings"]["int8"].as_array().map(Vec::len), Some(pngs.len()));
    // /info says the model takes images and how they are prepared.
    let (_, info) = server.get("/info");
    assert!(info.contains("CLIPImageProcessor"), "{info}");
    // Refusals, one line each: a URL, bytes that are not an image, a text-only route.
    for (route, body, needle) in [
        ("/v1/embeddings", json!({"input": [{"image": "https://example.invalid/cat.png"}]}), "fetches no URLs"),
        ("/v1/embeddings", json!({"input": [{"image": "bm90IGFuIGltYWdl"}]}), "input"),
        ("/v2/embed", json!({"images": ["data:image/png;base64,bm90"], "texts": ["a"]}), "not both"),
        ("/embed", json!({"inputs": [{"image": b64(&pngs[0])}]}), "images go to"),
    ] {
        let (status, answer) = server.post(route, &body);
        assert_eq!(status, 400, "{route}: {answer}");
        let message = answer.to_string();
        assert!(message.contains(needle), "{route}: {message}");
    }
    // With --allow-image-urls, the first PNG fetched over http (a redirect followed): the same
    // rows as its bytes sent, on both routes.
    let host = ImageHost::start(std::fs::read(&pngs[0]).expect("read"));
    let fetching = Server::start_with(&f.converted, &["--allow-image-urls", "--image-url-host", "127.0.0.1"]);
    let input = json!([{"image": host.url("/image.png")}, {"text": TEXTS[0]}]);
    let (status, body) = fetching.post("/v1/embeddings", &json!({"model": "clip", "input": input}));
    assert_eq!(status, 200, "{body}");
    let got: Vec<Vec<f32>> = body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| serde_json::from_value(d["embedding"].clone()).expect("row"))
        .collect();
    assert!(largest_difference(&got, &[unit(&want_images[0]), unit(&want_texts[0])]) < 1e-5, "{body}");
    let req = json!({"model": "clip", "input_type": "image", "images": [host.url("/redirect"), uris[1].clone()]});
    let (status, body) = fetching.post("/v2/embed", &req);
    assert_eq!(status, 200, "{body}");
    let got: Vec<Vec<f32>> = serde_json::from_value(body["embeddings"]["float"].clone()).expect("float rows");
    assert!(largest_difference(&got, &[unit(&want_images[0]), unit(&want_images[1])]) < 1e-5, "{body}");
    assert_eq!(host.requests(), 3);
    let (_, info) = fetching.get("/info");
    let info: Value = serde_json::from_str(&info).expect("/info's JSON");
    assert_eq!(info["image_urls"]["fetched"], true, "{info}");
    assert_eq!(info["image_urls"]["hosts"], json!(["127.0.0.1"]), "{info}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn bad_images_and_text_only_models_are_refused_in_one_line() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let f = make(t.path(), "clip");
    let set = reference(&["images", s(&t.path().join("images"))]);
    let jpeg = t.path().join("images").join(set["images"][0].as_str().expect("a name"));
    let bytes = std::fs::read(&jpeg).expect("read");
    let cases: [(&str, Vec<u8>, &str); 3] = [
        ("not-an-image.png", b"plain text, not an image".to_vec(), "line 1"),
        ("truncated.jpg", bytes[..bytes.len() / 3].to_vec(), "line 1"),
        ("bomb.png", png_declaring(60_000, 60_000), "line 1"),
    ];
    for (name, content, needle) in cases {
        let path = t.path().join(name);
        std::fs::write(&path, content).expect("write");
        let list = t.path().join(format!("{name}.txt"));
        std::fs::write(&list, format!("{}\n", s(&path))).expect("list");
        let out = t.path().join(format!("{name}.jsonl"));
        let o = nornir(&["vector", "embed", "--model", s(&f.converted), "--images", s(&list), "--output", s(&out)]);
        assert_one_line_error(&o, needle);
        assert!(!out.exists(), "{name}: nothing is written on an error");
    }
    // A text-only model given images.
    let list = t.path().join("one.txt");
    std::fs::write(&list, format!("{}\n", s(&jpeg))).expect("list");
    let o = nornir(&["vector", "embed", "--model", s(&common::model()), "--images", s(&list)]);
    assert_one_line_error(&o, "embeds text only");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn quantize_makes_both_towers_int8_and_measures_the_images() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let f = make(t.path(), "siglip");
    let int8 = t.path().join("siglip-int8");
    let o = nornir(&["vector", "quantize", "--model", s(&f.converted), "--output", s(&int8)]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("vision graph:"), "{}", String::from_utf8_lossy(&o.stdout));
    let record: Value =
        serde_json::from_slice(&std::fs::read(int8.join("quantization.json")).expect("record")).expect("json");
    let vision = &record["vision"];
    assert!(
        vision["rewritten"].as_u64().unwrap_or_default() > 0 && vision["cosine_min"].as_f64() > Some(0.9),
        "{vision}"
    );
    let set = reference(&["images", s(&t.path().join("images"))]);
    let names: Vec<String> = serde_json::from_value(set["images"].clone()).expect("names");
    let images: Vec<ImageInput> = names.iter().map(|n| ImageInput::path(t.path().join("images").join(n))).collect();
    let (a, b) = (Embedder::new(&f.converted, &cpu()).expect("float32"), Embedder::new(&int8, &cpu()).expect("int8"));
    assert!(b.takes_images(), "the int8 folder keeps its vision graph");
    let (a, b) = (a.embed_images(&images).expect("float32"), b.embed_images(&images).expect("int8"));
    let worst =
        a.rows().zip(b.rows()).map(|(x, y)| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>()).fold(1.0, f32::min);
    eprintln!("int8 vision graph: min cosine to float32 {worst:.5} on {} reference images", names.len());
    assert!(worst > 0.99, "{worst}");
}

/// A PNG whose header declares `width` x `height` RGB pixels, with one tiny IDAT: a
/// decompression bomb's first bytes, refused before anything is decoded.
fn png_declaring(width: u32, height: u32) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = Vec::new();
    header.extend_from_slice(&width.to_be_bytes());
    header.extend_from_slice(&height.to_be_bytes());
    header.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &header);
    chunk(&mut png, b"IDAT", &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]);
    chunk(&mut png, b"IEND", &[]);
    png
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}
