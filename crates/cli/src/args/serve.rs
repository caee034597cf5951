//! `nornir vector serve`'s arguments.

use std::path::PathBuf;

use clap::Args;

use super::{LongInputs, ModelArgs, parse_with_library};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on (0.0.0.0 for every interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port to listen on (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Also serve text-embeddings-inference's gRPC API (tei.v1: Info, Embed, Predict, Rerank,
    /// Tokenize, with their streams) on this port of --host, on the same models, queues, limits,
    /// API key and metrics (0: any free port; the chosen one is printed).
    #[arg(long, value_name = "PORT")]
    pub grpc_port: Option<u16>,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health.
    #[arg(long, env = "NORNIR_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Largest request body in bytes; larger ones get 413.
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_body_bytes: u64,
    /// Most texts in one request (OpenAI takes 2,048); more get 413.
    #[arg(long, value_name = "N", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_inputs: u32,
    /// Most texts waiting for a batch, across requests; a request that would pass it gets 503.
    #[arg(long, value_name = "N", default_value_t = 16384, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_queued_texts: u32,
    /// Threads answering HTTP (the model runs on its own worker threads).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub http_threads: u32,
    /// Seconds a request's texts may take to queue and run; past it the request gets 504 in its
    /// API's error shape, and its texts that have not started leave the queue.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0, value_parser = parse_timeout)]
    pub request_timeout: f64,
    /// Seconds a client has to send a request's head, and again its body; a client that
    /// trickles them (slowloris) is disconnected (408 for a body), and so is a connection idle
    /// that long.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0, value_parser = parse_timeout)]
    pub read_timeout: f64,
    /// How OpenAI `input` given as token ids is read: cl100k (as OpenAI defines them: ids of its
    /// cl100k_base encoding, decoded and tokenized again by the model's tokenizer) or refuse (400).
    #[arg(long, value_name = "READING", default_value = "cl100k", value_parser = ["cl100k", "refuse"])]
    pub token_ids: String,
    /// The models to serve, from a TOML file: one `[[model]]` table each, with name and folder,
    /// and optionally aliases, device, threads, workers, prompt_name, prompt, dimensions and
    /// ranges (relative folders and files are read from the file's folder). The other model
    /// flags apply to every model.
    #[arg(long, value_name = "FILE", conflicts_with = "model")]
    pub models_file: Option<PathBuf>,
    /// What to do with a text longer than the model reads when the request does not say (TEI's
    /// "truncate": true|false does; OpenAI's requests never do): truncate (keep its first
    /// tokens; the answer's x-truncated-inputs header counts them), refuse (413 naming the text
    /// and its token count, TEI's default), chunk or late (the document's vector, as `nornir
    /// vector embed --long chunk|late`).
    #[arg(long, value_name = "POLICY", default_value = "truncate", value_parser = parse_with_library::<LongInputs>)]
    pub long: LongInputs,
    /// Tokens per chunk with --long chunk|late (default: the model's length).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub window: Option<u32>,
    /// Tokens shared by neighbouring chunks with --long chunk|late (default 32).
    #[arg(long, value_name = "N")]
    pub overlap: Option<u32>,
    /// With several models, the one that answers a model name the server does not know
    /// (otherwise 404 with the list). With one model, every name is answered by it anyway.
    #[arg(long, value_name = "NAME")]
    pub default_model: Option<String>,
    /// int8 and uint8 ranges (a JSON file saved by `nornir vector embed --precision int8` or
    /// Python's calibrate()) for Cohere's int8 and uint8 embedding types, for every model
    /// (`ranges` in --models-file sets one model's). Without them, each model calibrates once
    /// per width on nornir's built-in sample, as every surface does; /info says which it uses.
    #[arg(long, value_name = "FILE")]
    pub ranges: Option<PathBuf>,
    /// Answer a model name the server does not know with 404 even when one model is served.
    #[arg(long)]
    pub strict_model_names: bool,
    /// Fetch images that requests give as http:// URLs (Cohere's `images`, Jina's `{"image":
    /// ...}`); without it a URL is 400 and images come as base64 or data URIs. Risky: the server
    /// fetches whatever clients name, internal addresses included (server-side request forgery);
    /// limit the hosts with --image-url-host. https is not fetched (this build has no TLS).
    #[arg(long)]
    pub allow_image_urls: bool,
    /// The most bytes of one fetched image; reading stops past it and the request gets 400.
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20, requires = "allow_image_urls", value_parser = clap::value_parser!(u64).range(1..))]
    pub image_url_max_bytes: u64,
    /// Seconds one image's fetch may take, redirects included (a request's fetches, 4 at once,
    /// also end within --request-timeout).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, requires = "allow_image_urls", value_parser = parse_timeout)]
    pub image_url_timeout: f64,
    /// Fetch images only from this host (a name or address as the URL writes it), at every
    /// redirect too; repeat it for several. Without it, any host.
    #[arg(long = "image-url-host", value_name = "HOST", requires = "allow_image_urls")]
    pub image_url_hosts: Vec<String>,
    #[command(flatten)]
    pub model: ModelArgs,
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t > 0.0 && t <= 86_400.0 => Ok(t),
        _ => Err(format!("{s:?} is not a number of seconds between 0 and 86400")),
    }
}
