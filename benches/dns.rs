//! `cargo bench --bench dns`: placeholder.
fn main() {}
