//! Compiles the subset of etcd's v3 API the store uses
//! (`protos/etcd/rpc.proto`) with `protox` (pure Rust), so building Weft
//! needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = "etcd/rpc.proto";
    println!("cargo:rerun-if-changed=protos/{file}");
    let descriptors = protox::compile([file], ["protos"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}
