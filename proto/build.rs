//! Compiles `protos/weft/v1/*.proto` with `protox` (pure Rust), so a fresh
//! machine needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["weft/v1/runs.proto", "weft/v1/workers.proto"];
    for file in files {
        println!("cargo:rerun-if-changed=protos/{file}");
    }
    let descriptors = protox::compile(files, ["protos"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
