//! A decoder reranker's `pair_template.json`: parsed, its placeholders checked at load (each
//! once, in the body only), and its body filled in one pass, so a query, instruction or document
//! is never read again as template.

use crate::values::PairTemplate;

const INSTRUCTION: &str = "{instruction}";
const QUERY: &str = "{query}";
const DOCUMENT: &str = "{document}";
const PLACEHOLDERS: [&str; 3] = [INSTRUCTION, QUERY, DOCUMENT];

/// `pair_template.json`'s text as a template whose body holds `{query}` and `{document}` once
/// each and `{instruction}` at most once, and whose prefix and suffix hold none (they are not
/// filled); any other `{name}` in the body is refused as a misspelt placeholder.
pub fn parse_pair_template(text: &str) -> Result<PairTemplate, String> {
    let t: PairTemplate = serde_json::from_str(text).map_err(|e| {
        format!("{e} (it needs \"prefix\", \"body\" and \"suffix\", strings, and may have \"instruction\")")
    })?;
    for (part, value) in [("prefix", &t.prefix), ("suffix", &t.suffix)] {
        if let Some(p) = PLACEHOLDERS.iter().find(|p| value.contains(*p)) {
            return Err(format!("\"{part}\" holds {p}, which is filled only in \"body\": move it into the body"));
        }
    }
    for (p, least) in [(QUERY, 1), (DOCUMENT, 1), (INSTRUCTION, 0)] {
        let n = t.body.matches(p).count();
        if n < least || n > 1 {
            let want = if least == 1 { "exactly once" } else { "at most once" };
            return Err(format!("\"body\" holds {p} {n} times; it must hold it {want}"));
        }
    }
    if let Some(name) = unknown_placeholder(&t.body) {
        return Err(format!(
            "\"body\" holds {{{name}}}, which is not a placeholder (they are {INSTRUCTION}, {QUERY} and {DOCUMENT}): correct its name"
        ));
    }
    Ok(t)
}

/// The first `{name}` of `body` (a word of letters, digits and `_`) that is not a placeholder.
fn unknown_placeholder(body: &str) -> Option<&str> {
    let mut rest = body;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let word_len = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
        let (word, tail) = after.split_at(word_len);
        if !word.is_empty() && tail.starts_with('}') && !PLACEHOLDERS.contains(&format!("{{{word}}}").as_str()) {
            return Some(word);
        }
        rest = after;
    }
    None
}

/// The template's body with its placeholders replaced, scanning the body once: what replaces a
/// placeholder is copied as it is and never scanned.
pub(crate) fn fill_body(t: &PairTemplate, query: &str, document: &str) -> String {
    let mut out = String::with_capacity(t.body.len() + t.instruction.len() + query.len() + document.len());
    let mut rest = t.body.as_str();
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let at = &rest[open..];
        let filled = [(INSTRUCTION, t.instruction.as_str()), (QUERY, query), (DOCUMENT, document)]
            .into_iter()
            .find(|(p, _)| at.starts_with(p));
        match filled {
            Some((p, value)) => {
                out.push_str(value);
                rest = &at[p.len()..];
            }
            None => {
                out.push('{');
                rest = &at[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const QWEN3: &str = r#"{"prefix": "<|im_start|>system\nJudge.<|im_end|>\n", "body": "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}", "suffix": "<|im_end|>\n", "instruction": "Given a web search query"}"#;

    fn template() -> PairTemplate {
        parse_pair_template(QWEN3).expect("Qwen3-Reranker's template")
    }

    #[test]
    fn user_text_that_looks_like_a_placeholder_is_copied_not_filled() {
        let t = template();
        let body = fill_body(&t, "what is {document}?", "a {query} and {instruction} and {x} and }{");
        assert_eq!(
            body,
            "<Instruct>: Given a web search query\n<Query>: what is {document}?\n<Document>: a {query} and {instruction} and {x} and }{"
        );
        let mut braced = t.clone();
        braced.instruction = "find {document}".to_owned();
        assert_eq!(fill_body(&braced, "q", "d"), "<Instruct>: find {document}\n<Query>: q\n<Document>: d");
    }

    #[test]
    fn stray_braces_in_the_body_stay() {
        let t = parse_pair_template(r#"{"prefix": "", "body": "{ {query} } {} {document}{", "suffix": ""}"#)
            .expect("stray braces are text");
        assert_eq!(fill_body(&t, "q", "d"), "{ q } {} d{");
    }

    #[test]
    fn a_template_without_each_placeholder_once_is_refused_naming_it() {
        let cases = [
            (r#"{"prefix": "", "body": "<Query>: {query}", "suffix": ""}"#, "{document} 0 times"),
            (r#"{"prefix": "", "body": "{query} {document} {document}", "suffix": ""}"#, "{document} 2 times"),
            (r#"{"prefix": "", "body": "{document}", "suffix": ""}"#, "{query} 0 times"),
            (r#"{"prefix": "", "body": "{instruction}{instruction}{query}{document}", "suffix": ""}"#, "at most once"),
            (r#"{"prefix": "{query}", "body": "{query}{document}", "suffix": ""}"#, "\"prefix\" holds {query}"),
            (r#"{"prefix": "", "body": "{query}{document}", "suffix": "{instruction}"}"#, "\"suffix\" holds"),
            (r#"{"prefix": "", "body": "{query}{doc}{document}", "suffix": ""}"#, "{doc}, which is not a placeholder"),
            (r#"{"prefix": "", "body": "{query}{document}"}"#, "missing field `suffix`"),
            (r#"{"prefix": 1, "body": "{query}{document}", "suffix": ""}"#, "invalid type"),
            ("[[[[", "invalid type"),
            ("{\"prefix\": \"\"", "EOF"),
        ];
        for (text, needle) in cases {
            let e = parse_pair_template(text).expect_err(text);
            assert!(e.contains(needle), "{text}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}
