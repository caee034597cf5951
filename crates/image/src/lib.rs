//! Image bytes to a model's pixel tensor, as the published image processors compute it with
//! Pillow. Not yet built: see the crate's description.
