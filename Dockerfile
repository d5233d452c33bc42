# syntax=docker/dockerfile:1
#
# queue-exporter container image.
#
#   docker build -t queue-exporter:0.1.0 .
#   docker run --read-only -p 9731:9731 -p 9732:9732 \
#     -v "$PWD/config.yaml:/etc/queue-exporter/config.yaml:ro" queue-exporter:0.1.0
#
# Stage 1 builds a release binary with the official Rust image (Debian 12).
# Stage 2 is distroless `cc` on Debian 12: the same glibc the binary was linked
# against, libgcc_s, CA certificates, no shell and no package manager. It runs
# as the image's `nonroot` user (UID/GID 65532) and writes nothing to disk, so
# a read-only root filesystem works. No protoc is needed (build.rs uses protox).
#
# Remember `listen:` in the config: the defaults are 127.0.0.1, which nothing
# outside the container can reach. Use 0.0.0.0:9731 and 0.0.0.0:9732.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
COPY src ./src
COPY benches ./benches
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin queue-exporter \
 && cp target/release/queue-exporter /usr/local/bin/queue-exporter

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/queue-exporter /usr/local/bin/queue-exporter
USER 65532:65532
# 9731: /metrics, /healthz, /readyz. 9732: the KEDA external scaler (gRPC).
EXPOSE 9731 9732
ENTRYPOINT ["/usr/local/bin/queue-exporter"]
CMD ["--config", "/etc/queue-exporter/config.yaml"]
