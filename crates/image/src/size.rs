//! transformers' `get_size_dict` for `size` and `crop_size`: an int, a [height, width] list or a
//! dict with one of the allowed key sets, each side checked to lie in 1..=8192.

use serde_json::Value;

use crate::error::{ImageError, short};

/// The largest side a config may ask for.
pub(crate) const MAX_SIDE: u64 = 8192;

/// A size as the dict's keys give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SizeSpec {
    /// `{"height", "width"}`.
    HeightWidth(u32, u32),
    /// `{"shortest_edge"}`.
    ShortestEdge(u32),
    /// `{"shortest_edge", "longest_edge"}`.
    ShortestLongest(u32, u32),
    /// `{"longest_edge"}`.
    LongestEdge(u32),
}

/// Reads `value` as `get_size_dict(value, default_to_square=square)` does.
pub(crate) fn read_size(value: &Value, key: &'static str, square: bool) -> Result<SizeSpec, ImageError> {
    match value {
        Value::Number(_) => {
            let n = side(value, key)?;
            Ok(if square { SizeSpec::HeightWidth(n, n) } else { SizeSpec::ShortestEdge(n) })
        }
        // A list or tuple is (height, width).
        Value::Array(items) if items.len() == 2 => {
            Ok(SizeSpec::HeightWidth(side(&items[0], key)?, side(&items[1], key)?))
        }
        Value::Object(map) => {
            let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
            keys.sort_unstable();
            let get = |name: &str| map.get(name).map_or(Err(bad_keys(key)), |v| side(v, key));
            match keys.as_slice() {
                ["height", "width"] => Ok(SizeSpec::HeightWidth(get("height")?, get("width")?)),
                ["shortest_edge"] => Ok(SizeSpec::ShortestEdge(get("shortest_edge")?)),
                ["longest_edge", "shortest_edge"] => {
                    Ok(SizeSpec::ShortestLongest(get("shortest_edge")?, get("longest_edge")?))
                }
                ["longest_edge"] => Ok(SizeSpec::LongestEdge(get("longest_edge")?)),
                _ => Err(bad_keys(key)),
            }
        }
        other => Err(ImageError::config(
            key,
            format!(
                "is {}: give a number, [height, width] or a dict such as {{\"height\": 224, \"width\": 224}}",
                short(&other.to_string())
            ),
        )),
    }
}

/// One side: an integer in 1..=[`MAX_SIDE`].
pub(crate) fn side(value: &Value, key: &'static str) -> Result<u32, ImageError> {
    match value.as_u64() {
        Some(n @ 1..=MAX_SIDE) => Ok(n as u32),
        _ => Err(ImageError::config(
            key,
            format!(
                "has the side {}: each side must be a whole number from 1 to {MAX_SIDE}",
                short(&value.to_string())
            ),
        )),
    }
}

fn bad_keys(key: &'static str) -> ImageError {
    ImageError::config(
        key,
        "must have the keys height and width, or shortest_edge (with or without longest_edge), or longest_edge",
    )
}
