//! The numbers of a model folder's configs checked where they are read (`config.json`'s sizes,
//! `sentence_bert_config.json`'s and PyLate's lengths, the Dense modules' and heads' widths): each
//! in its range, else one line naming the key, the value and the range. The caller puts the file
//! in front.

use std::ops::RangeInclusive;

use serde::de::DeserializeOwned;
use serde_json::Value;

/// The most tokens a length may name (positions, `max_seq_length`, PyLate's lengths): a bound
/// where the model states none, so that a length is never an allocation of petabytes.
pub(crate) const MAX_TOKENS: usize = 1_048_576;
/// The widest a vector, a Dense layer, a head or a vocabulary may be, and the most labels.
pub(crate) const MAX_WIDTH: usize = 1 << 24;

/// `value` of `key` (`about`: what the key is) within `range`, or why not, in one line.
pub(crate) fn count_in(key: &str, value: usize, range: RangeInclusive<usize>, about: &str) -> Result<usize, String> {
    if range.contains(&value) {
        return Ok(value);
    }
    let must = match (*range.start(), *range.end()) {
        (1, high) => format!("a positive whole number, at most {high}"),
        (low, high) => format!("a whole number from {low} to {high}"),
    };
    Err(format!("{key} is {value}, it must be {must} ({about}): fix the config"))
}

/// [`count_in`] where the config may leave `key` out.
pub(crate) fn maybe_in(
    key: &str,
    value: Option<usize>,
    range: RangeInclusive<usize>,
    about: &str,
) -> Result<Option<usize>, String> {
    value.map(|v| count_in(key, v, range, about)).transpose()
}

/// `text` read as `T`; where a key holds a value of the wrong kind (a negative or fractional
/// count, a string for a number), the error names the key and its value.
pub(crate) fn from_json<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let e = match serde_json::from_str(text) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) {
        // The key whose removal lets the rest read (or leaves only that key missing).
        let culprit = map.iter().find(|(key, _)| {
            let mut without = map.clone();
            without.remove(*key);
            match serde_json::from_value::<T>(Value::Object(without)) {
                Ok(_) => true,
                Err(e) => e.to_string() == format!("missing field `{key}`"),
            }
        });
        if let Some((key, value)) = culprit {
            return Err(format!("{key} is {value}, not a value of its kind ({e}): fix the config"));
        }
    }
    Err(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Sizes {
        width: usize,
        #[serde(default)]
        length: Option<usize>,
    }

    #[test]
    fn a_count_out_of_range_and_a_value_of_the_wrong_kind_are_named() {
        assert_eq!(count_in("width", 3, 1..=4, "the width"), Ok(3));
        assert_eq!(
            count_in("width", 0, 1..=4, "the width"),
            Err("width is 0, it must be a positive whole number, at most 4 (the width): fix the config".to_owned())
        );
        let e = count_in("labels", 9, 0..=4, "labels").expect_err("refused");
        assert!(e.contains("from 0 to 4"), "{e}");
        assert_eq!(maybe_in("width", None, 1..=4, "the width"), Ok(None));
        for (text, needle) in [
            (r#"{"width":-1}"#, "width is -1, not a value of its kind (invalid value: integer `-1`"),
            (r#"{"width":4,"length":2.5}"#, "length is 2.5, not a value of its kind (invalid type: floating point"),
            (r#"{"width":"4"}"#, "width is \"4\", not a value of its kind"),
        ] {
            let e = from_json::<Sizes>(text).expect_err(text);
            assert!(e.contains(needle) && e.ends_with("fix the config"), "{e}");
        }
        // serde_json reads no 1e400 (not infinity): refused, as before.
        assert!(from_json::<Sizes>(r#"{"width":1e400}"#).is_err());
        assert_eq!(from_json::<Sizes>(r#"{"width":4}"#).map(|s| (s.width, s.length)), Ok((4, None)));
    }
}
