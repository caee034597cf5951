//! The embedder's errors in this command's words: each typed kind that names a library option or
//! calls for advice is written with the command's flags, by matching on the kind, never by
//! rewriting the library's text.

use nornir_vector::EmbedError;
use nornir_vector::diagnostics::MIN_ORT;

/// The `nornir` flag that sets the library option named `option` (as `EmbedError::InvalidOption`
/// names it).
fn flag_for(option: &str) -> String {
    let flag = match option {
        "chunking" => "--long",
        "chunking.window" => "--window",
        "chunking.late" => "--long late",
        "dimensions" => "--dimensions",
        "ep_libraries" => "--ep-lib",
        "device" => "--device",
        "max_length" => "--max-length",
        "max_queued_texts" => "--max-queued-texts",
        "model_file" => "--model-file",
        "ort_library" => "--ort-lib",
        "output_name" => "--output-name",
        "pooling" => "--pooling",
        "prompt_name" => "--prompt-name",
        "prompt" => "--prompt",
        "images" => "--images",
        "workers" => "--workers",
        "task" => "--task",
        "precision" => "--precision",
        "ranges" => "--ranges",
        "top_k" => "--top-k",
        "query" => "--query",
        "threads" => "--threads",
        "token_budget" => "--batch-tokens",
        // The server's options, as `ServerConfig` names them.
        "max_inputs" => "--max-inputs",
        "max_body_bytes" => "--max-body-bytes",
        "request_timeout" => "--request-timeout",
        "read_timeout" => "--read-timeout",
        "image_url_max_bytes" => "--image-url-max-bytes",
        "image_url_timeout" => "--image-url-timeout",
        "image_url_hosts" => "--image-url-host",
        other => return format!("`{other}`"),
    };
    flag.to_owned()
}

/// A library option (the embedder's or the server's, as their errors name it) refused, said with
/// the flag that sets it.
pub fn invalid_flag(option: &str, reason: &str) -> String {
    format!("invalid {}: {reason}", flag_for(option))
}

/// The oldest ONNX Runtime this build loads.
pub fn oldest_ort() -> Option<(u64, u64)> {
    Some(MIN_ORT)
}

/// This error's own line (without its causes) as `nornir` says it, when it is an [`EmbedError`]
/// whose library wording names options or leaves advice to the
/// command; `None` otherwise.
pub fn embed_error_text(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(nornir_vector::InvalidOption { option, reason, .. }) = e.downcast_ref() {
        return Some(invalid_flag(option, reason));
    }
    let (major, minor) = MIN_ORT;
    Some(match e.downcast_ref::<EmbedError>()? {
        EmbedError::InvalidOption { option, reason, .. } => invalid_flag(option, reason),
        e @ EmbedError::NoOrtLibrary { .. } => {
            format!(
                "{e}; or pass --ort-lib FILE (in a nornir checkout, `cargo xtask fetch` puts one in the nornir cache)"
            )
        }
        EmbedError::ExplicitOrtUnusable { reason, .. } => format!(
            "{reason}: point --ort-lib (or ORT_DYLIB_PATH) at a libonnxruntime.so file, or leave both unset to let nornir search"
        ),
        EmbedError::OrtLoad { path, reason, .. } => format!(
            "{}: cannot be loaded as ONNX Runtime: {reason}; point --ort-lib (or ORT_DYLIB_PATH) at a libonnxruntime.so ({major}.{minor} or newer)",
            path.display()
        ),
        EmbedError::WrongKind { wanted, kind, .. } => format!(
            "this command needs {} and this model is {}: use {}",
            wanted.with_article(),
            kind.with_article(),
            kind.calls().commands
        ),
        EmbedError::ForcedDeviceFailed { vendor, details, .. } => format!(
            "the device was forced to {vendor}, but no {vendor} provider could be used: {details}. Use --device auto to fall back to the CPU, or see why with `nornir vector doctor`"
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_the_library_names_has_a_flag() {
        for option in [
            "chunking",
            "chunking.window",
            "chunking.late",
            "dimensions",
            "ep_libraries",
            "device",
            "max_length",
            "max_queued_texts",
            "model_file",
            "ort_library",
            "output_name",
            "pooling",
            "prompt_name",
            "prompt",
            "workers",
            "task",
            "threads",
            "token_budget",
            "max_inputs",
            "max_body_bytes",
            "request_timeout",
            "read_timeout",
            "image_url_max_bytes",
            "image_url_timeout",
            "image_url_hosts",
        ] {
            assert!(flag_for(option).starts_with("--"), "{option}");
            let flag = flag_for(option);
            use clap::CommandFactory as _;
            assert!(
                crate::Cli::command().get_subcommands().flat_map(|c| c.get_subcommands()).any(|c| c
                    .get_arguments()
                    .any(|a| a.get_long().is_some_and(|l| flag.split_whitespace().next() == Some(&format!("--{l}"))))),
                "{flag} is no flag of nornir"
            );
        }
        assert_eq!(flag_for("something_new"), "`something_new`");
    }
}
