//! Compiles `protos/weft/v1/*.proto` with `protox` (pure Rust), so a fresh
//! machine needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "weft/v1/runs.proto",
        "weft/v1/workers.proto",
        "weft/v1/group.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed=protos/{file}");
    }
    let descriptors = protox::compile(files, ["protos"])?;
    // Server traits only for crates that serve (the coordinator): a client
    // never pulls in tonic's server and router.
    let server = std::env::var_os("CARGO_FEATURE_SERVER").is_some();
    // Every service encodes with `codec::SizedCodec`: room for a whole
    // message made at once.
    tonic_prost_build::configure()
        .build_server(server)
        .codec_path("crate::codec::SizedCodec")
        // A batch of tasks is written and read by hand, its map items'
        // texts shared rather than copied (`worker_protocol::wire::batch`).
        .extern_path(
            ".weft.v1.TaskBatch",
            "crate::worker_protocol::wire::batch::TaskBatch",
        )
        // A result likewise, its run id shared (`worker_protocol::wire::result`).
        .extern_path(
            ".weft.v1.TaskResult",
            "crate::worker_protocol::wire::result::TaskResult",
        )
        .compile_fds(descriptors)?;
    Ok(())
}
