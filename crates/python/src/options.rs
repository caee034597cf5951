//! Keyword arguments to `CallOptions`: the prompt, the long-text policy and the rest.

use pyo3::prelude::*;

use nornir_vector::{CallOptions, CancelHandle, LongInputs, PairOptions, Prompt, Truncation};

use crate::errors::invalid;

/// The prompt of `prompt_name=` or `prompt=`, which an embedder and a call both take; both at
/// once is an error.
pub(crate) fn one_prompt(prompt_name: Option<String>, prompt: Option<String>) -> PyResult<Option<Prompt>> {
    match (prompt_name, prompt) {
        (Some(_), Some(_)) => Err(invalid("prompt", "give prompt or prompt_name, not both".to_owned())),
        (Some(name), None) => Ok(Some(Prompt::Name(name))),
        (None, text) => Ok(text.map(Prompt::Text)),
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn call_options(
    prompt_name: Option<String>,
    prompt: Option<String>,
    normalize: Option<bool>,
    dimensions: Option<usize>,
    truncation: &str,
    long: Option<&str>,
    window: Option<usize>,
    overlap: Option<usize>,
) -> PyResult<CallOptions> {
    let truncation: Truncation = truncation.parse().map_err(|e| invalid("truncation", e))?;
    let policy = match long {
        None if window.is_some() || overlap.is_some() => {
            return Err(invalid("window", "window and overlap need long=\"chunk\" or long=\"late\"".to_owned()));
        }
        None => LongInputs::Truncate,
        Some(name) => {
            name.parse::<LongInputs>().and_then(|p| p.with_window(window, overlap)).map_err(|e| invalid("long", e))?
        }
    };
    // `truncation` says which end a truncating policy keeps.
    let mut o = match policy {
        LongInputs::Truncate => CallOptions::new().with_truncation(truncation),
        other => other.call_options(),
    };
    o.prompt = one_prompt(prompt_name, prompt)?;
    if let Some(n) = normalize {
        o = o.with_normalize(n);
    }
    if let Some(d) = dimensions {
        o = o.with_dimensions(d);
    }
    Ok(o)
}

/// `raw_scores=` and `truncation=` of a cross-encoder's call.
pub(crate) fn pair_options(raw_scores: bool, truncation: &str, cancel: &CancelHandle) -> PyResult<PairOptions> {
    let truncation: Truncation = truncation.parse().map_err(|e| invalid("truncation", e))?;
    let call = CallOptions::new().with_truncation(truncation).with_cancel(cancel);
    Ok(PairOptions::new().with_raw_scores(raw_scores).with_call(call))
}

/// A rerank's options: `pair_options` and, with `long="chunk"`, chunks of `window` tokens
/// overlapping by `overlap` (a long document scored by its best chunk).
pub(crate) fn rerank_options(
    raw_scores: bool,
    truncation: &str,
    chunk: (Option<&str>, Option<usize>, Option<usize>),
    cancel: &CancelHandle,
) -> PyResult<PairOptions> {
    let mut options = pair_options(raw_scores, truncation, cancel)?;
    let (long, window, overlap) = chunk;
    match long.map(|l| l.parse::<LongInputs>().and_then(|p| p.with_window(window, overlap))) {
        None | Some(Ok(LongInputs::Truncate)) if window.is_none() && overlap.is_none() => {}
        Some(Ok(LongInputs::Chunk(c))) if !c.late => options.call.chunking = Some(c),
        Some(Err(e)) => return Err(invalid("long", e)),
        _ => {
            return Err(invalid(
                "long",
                "a reranker takes long=\"chunk\" (with window and overlap) or \"truncate\"".to_owned(),
            ));
        }
    }
    Ok(options)
}

/// One input of `predict`: a `(query, document)` pair (a tuple or list of two str) or a str alone.
pub(crate) fn pair_of(input: &Bound<'_, PyAny>) -> PyResult<(String, Option<String>)> {
    if let Ok(text) = input.extract::<String>() {
        return Ok((text, None));
    }
    input.extract::<(String, String)>().map(|(a, b)| (a, Some(b))).map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err("each input must be a (query, document) pair of str, or a str")
    })
}
