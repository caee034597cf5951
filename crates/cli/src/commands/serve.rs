//! `nornir vector serve`: reads the flags (and the models file), then listens with
//! `nornir_server::router` while the models load, one after another, beside it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nornir_server::{Models, ServerConfig, TokenIds};
use nornir_vector::{Device, Embedder, EmbedderOptions, QueueFull};
use serde::Deserialize;

use super::load::{long_policy, model_dir, options, prompt};
use crate::args::ServeArgs;

/// One model to serve: its name, other names, folder and options.
struct Served {
    name: String,
    aliases: Vec<String>,
    dir: PathBuf,
    options: EmbedderOptions,
}

/// A `[[model]]` table of `--models-file`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileModel {
    name: String,
    #[serde(default)]
    aliases: Vec<String>,
    folder: PathBuf,
    device: Option<String>,
    threads: Option<usize>,
    workers: Option<usize>,
    prompt_name: Option<String>,
    prompt: Option<String>,
    /// jina-embeddings-v3's task adapter for this model (`--task` for one folder).
    task: Option<String>,
    dimensions: Option<usize>,
    /// int8 and uint8 ranges, a JSON file.
    ranges: Option<PathBuf>,
    /// The old names of `workers` and `dimensions`: read, with a warning.
    sessions: Option<usize>,
    dim: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelsFile {
    model: Vec<FileModel>,
}

/// The name a bare folder is served under: its own name.
fn folder_name(dir: &Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "nornir".to_owned())
}

/// `NAME[,ALIAS...]=DIR`, or a bare `DIR` (also one whose name holds `=`, when it exists).
fn parse_model_flag(value: &Path) -> (String, Vec<String>, PathBuf) {
    let text = value.to_string_lossy();
    match text.split_once('=') {
        // The served name has no '/', so a path holding '=' stays a path; aliases may (hub ids).
        Some((names, dir))
            if !value.exists() && !names.is_empty() && !names.split(',').next().unwrap_or("/").contains('/') =>
        {
            let mut names = names.split(',').map(|n| n.trim().to_owned());
            let name = names.next().unwrap_or_default();
            (name, names.collect(), PathBuf::from(dir))
        }
        _ => (folder_name(value), Vec::new(), value.to_path_buf()),
    }
}

/// Ranges from a JSON file, checked by the library's one constructor.
fn read_ranges(file: &Path) -> Result<std::sync::Arc<nornir_vector::Ranges>> {
    Ok(std::sync::Arc::new(nornir_vector::Ranges::read(file)?))
}

/// The models of `--models-file`, each with the command line's options under its own.
fn read_models_file(file: &Path, base: &EmbedderOptions) -> Result<Vec<Served>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read --models-file {}", file.display()))?;
    let parsed: ModelsFile = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "--models-file {}: {}; each model is a [[model]] table with name and folder",
            file.display(),
            e.message()
        )
    })?;
    let root = file.parent().unwrap_or(Path::new("."));
    parsed
        .model
        .into_iter()
        .map(|m| {
            let mut o = base.clone();
            if let Some(d) = &m.device {
                o.device = d.parse::<Device>().map_err(|e| anyhow::anyhow!("model {:?}: device: {e}", m.name))?;
            }
            for (old, new, given) in [("sessions", "workers", m.sessions), ("dim", "dimensions", m.dim)] {
                if given.is_some() {
                    eprintln!("nornir: warning: --models-file, model {:?}: `{old}` is now `{new}`", m.name);
                }
            }
            o.threads = m.threads.or(o.threads);
            o.workers = m.workers.or(m.sessions).or(o.workers);
            o.call.dimensions = m.dimensions.or(m.dim).or(o.call.dimensions);
            if m.prompt.is_some() && m.prompt_name.is_some() {
                anyhow::bail!("model {:?}: give prompt or prompt_name, not both", m.name);
            }
            if let Some(p) = prompt(m.prompt, m.prompt_name) {
                o.call.prompt = Some(p);
            }
            if let Some(task) = m.task {
                o.task = Some(task);
            }
            if let Some(file) = &m.ranges {
                o.call.ranges = Some(read_ranges(&root.join(file)).with_context(|| format!("model {:?}", m.name))?);
            }
            Ok(Served { name: m.name, aliases: m.aliases, dir: root.join(m.folder), options: o })
        })
        .collect()
}

/// Every model the flags name, with its options.
fn served_models(a: &ServeArgs) -> Result<Vec<Served>> {
    let mut base = options(&a.model)?;
    base.queue_full = QueueFull::Refuse;
    base.max_queued_texts = a.max_queued_texts as usize;
    if let Some(file) = &a.ranges {
        base.call.ranges = Some(read_ranges(file)?);
    }
    let served = if let Some(file) = &a.models_file {
        read_models_file(file, &base)?
    } else if a.model.model.is_empty() {
        let dir = model_dir(&a.model)?;
        vec![Served { name: folder_name(&dir), aliases: Vec::new(), dir, options: base }]
    } else {
        a.model
            .model
            .iter()
            .map(|v| {
                let (name, aliases, dir) = parse_model_flag(v);
                Served { name, aliases, dir, options: base.clone() }
            })
            .collect()
    };
    // A folder that is not a model is one line and exit 2 before anything listens.
    for m in &served {
        nornir_vector::diagnostics::ModelFolder::open(&m.dir, m.options.model_file.as_deref())
            .with_context(|| format!("model {:?}", m.name))?;
    }
    Ok(served)
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = terminate => {},
    }
    eprintln!("nornir: shutting down: finishing the requests in flight");
}

pub fn serve(a: &ServeArgs) -> Result<()> {
    let served = served_models(a)?;
    let models = Arc::new(Models::with_aliases(served.iter().map(|m| (m.name.clone(), m.aliases.clone())))?);
    let token_ids: TokenIds = a.token_ids.parse().map_err(anyhow::Error::msg)?;
    let long = long_policy(a.long, a.window.map(|w| w as usize), a.overlap.map(|o| o as usize))?;
    let chunks_by_default = matches!(long, nornir_vector::LongInputs::Chunk(_));
    let mut config = ServerConfig::default()
        .with_max_inputs(a.max_inputs as usize)
        .with_max_body_bytes(a.max_body_bytes as usize)
        .with_request_timeout(Duration::from_secs_f64(a.request_timeout))
        .with_read_timeout(Duration::from_secs_f64(a.read_timeout))
        .with_token_ids(token_ids)
        .with_long(long)
        .with_strict_model_names(a.strict_model_names)
        .with_image_urls(a.allow_image_urls)
        .with_image_url_max_bytes(usize::try_from(a.image_url_max_bytes).unwrap_or(usize::MAX))
        .with_image_url_timeout(Duration::from_secs_f64(a.image_url_timeout))
        .with_image_url_hosts(a.image_url_hosts.iter().cloned());
    if let Some(key) = &a.api_key {
        config = config.with_api_key(key.clone());
    }
    if let Some(name) = &a.default_model {
        config = config.with_default_model(name.clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.http_threads as usize)
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    runtime.block_on(async move {
        let addr: SocketAddr = format!("{}:{}", a.host, a.port)
            .parse()
            .with_context(|| format!("--host {:?} is not an IP address", a.host))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}: choose another --port or --host"))?;
        let bound = listener.local_addr()?;
        eprintln!("nornir: listening on http://{bound} (loading the models; /health answers 503 until they are ready)");
        // Load beside the server: /health says "loading" meanwhile, and a failure ends the process.
        let loading = Arc::clone(&models);
        let load = tokio::task::spawn_blocking(move || -> Result<()> {
            for m in served {
                let embedder = Embedder::new(&m.dir, &m.options).with_context(|| format!("model {:?}", m.name))?;
                // Every session before /health says ready: no request waits for one, and /info
                // and /metrics count the memory of each.
                embedder.warm_up();
                eprintln!("nornir: ready: {} on {}", m.name, embedder.report().active_provider);
                let kind = embedder.model_info().folder.kind.kind;
                if chunks_by_default && kind != nornir_vector::ModelKind::Embedder {
                    // The library's rule: only an embedder's dense vectors are made from chunks.
                    eprintln!(
                        "nornir: {} is {}, which cannot chunk: its long texts are truncated (x-truncated-inputs counts them), or refused where a request says truncate: false",
                        m.name,
                        kind.with_article()
                    );
                }
                loading.set_loaded(&m.name, Arc::new(embedder))?;
            }
            Ok(())
        });
        let read_timeout = config.read_timeout;
        let (router, grpc) = nornir_server::router_and_grpc(models, config)
            .map_err(|c| anyhow::anyhow!(super::errors::invalid_flag(c.option, &c.reason)))?;
        if let Some(port) = a.grpc_port {
            let addr = SocketAddr::new(addr.ip(), port);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} for gRPC: choose another --grpc-port"))?;
            eprintln!("nornir: gRPC (tei.v1) on {}", listener.local_addr()?);
            tokio::spawn(async move {
                if let Err(e) = nornir_server::serve_grpc(listener, grpc, shutdown_signal()).await {
                    tracing::error!("the gRPC server failed: {e}");
                }
            });
        }
        let server = tokio::spawn(nornir_server::serve(listener, router, read_timeout, shutdown_signal()));
        match load.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.context("cannot load the model")),
            Err(e) => bail!("the model loader failed: {e}"),
        }
        server.await.context("the server task failed")?.context("the server failed")?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nornir_vector::Prompt;

    #[test]
    fn model_flags_name_their_models() {
        let none = Vec::<String>::new();
        assert_eq!(
            parse_model_flag(Path::new("models/bge")),
            ("bge".to_owned(), none.clone(), PathBuf::from("models/bge"))
        );
        assert_eq!(
            parse_model_flag(Path::new("q=models/bge")),
            ("q".to_owned(), none.clone(), PathBuf::from("models/bge"))
        );
        assert_eq!(
            parse_model_flag(Path::new("q,text-embedding-3-small, BAAI/bge-small-en-v1.5=models/bge")),
            (
                "q".to_owned(),
                vec!["text-embedding-3-small".to_owned(), "BAAI/bge-small-en-v1.5".to_owned()],
                PathBuf::from("models/bge")
            )
        );
        assert_eq!(parse_model_flag(Path::new("a/b=c")).0, "b=c", "a path whose folder name holds '='");
        let t = tempfile::tempdir().expect("tempdir");
        let odd = t.path().join("a=b");
        std::fs::create_dir(&odd).expect("dir");
        assert_eq!(parse_model_flag(&odd), ("a=b".to_owned(), none, odd.clone()), "an existing folder is a folder");
    }

    #[test]
    fn a_models_file_sets_each_model_over_the_flags() {
        let t = tempfile::tempdir().expect("tempdir");
        let file = t.path().join("models.toml");
        std::fs::write(
            &file,
            "[[model]]\nname = \"q\"\naliases = [\"query\"]\nfolder = \"bge\"\nprompt_name = \"query\"\nthreads = 1\n\n[[model]]\nname = \"d\"\nfolder = \"/abs/bge\"\ndevice = \"cpu\"\ntask = \"retrieval.passage\"\n",
        )
        .expect("write");
        let base =
            EmbedderOptions::default().with_threads(4).with_call(nornir_vector::CallOptions::new().with_prompt("x: "));
        let m = read_models_file(&file, &base).expect("parse");
        assert_eq!((m[0].name.as_str(), m[0].dir.clone()), ("q", t.path().join("bge")));
        assert_eq!((m[0].aliases.clone(), m[1].aliases.len()), (vec!["query".to_owned()], 0));
        assert_eq!(
            (m[0].options.threads, m[0].options.call.prompt.clone()),
            (Some(1), Some(Prompt::Name("query".to_owned())))
        );
        assert_eq!(
            (m[1].dir.clone(), m[1].options.device, m[1].options.threads),
            (PathBuf::from("/abs/bge"), Device::Cpu, Some(4))
        );
        assert_eq!((m[0].options.task.as_deref(), m[1].options.task.as_deref()), (None, Some("retrieval.passage")));
        std::fs::write(&file, "[[model]]\nname = \"q\"\nfolder = \"bge\"\nthread = 1\n").expect("write");
        let e = read_models_file(&file, &base).err().expect("a typo is an error").to_string();
        assert!(e.contains("thread") && e.contains("[[model]]"), "{e}");
    }
}
