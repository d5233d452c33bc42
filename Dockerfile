# syntax=docker/dockerfile:1
#
# queue-exporter container image.
#
#   docker build -t queue-exporter:0.1.0 .        # or: podman build -t queue-exporter:0.1.0 .
#   docker run --read-only --cap-drop ALL -p 9731:9731 -p 9732:9732 \
#     -v "$PWD/config.yaml:/etc/queue-exporter/config.yaml:ro" queue-exporter:0.1.0
#
# The `build` stage compiles the release binary with the official Rust image
# (Debian 12; no protoc is needed: build.rs uses protox) and lays out the
# image's root filesystem with scripts/container-rootfs: the binary, the
# shared libraries ldd lists for it, the CA certificates, passwd/group entries
# for 65532. The final stage is FROM scratch with only that: no shell, no
# package manager, nothing writable, nothing executable but the binary and
# its dynamic loader. It runs as UID/GID 65532 and writes nothing to disk, so
# a read-only root filesystem works.
#
# From a binary built on the host (no base image is pulled; tests/container.rs
# does this), put the rootfs in an otherwise empty context directory:
#
#   scripts/container-rootfs target/release/queue-exporter CTX/rootfs
#   podman build -f Dockerfile --build-arg ROOTFS_FROM=prebuilt CTX
#
# Remember `listen:` in the config: the defaults are 127.0.0.1, which nothing
# outside the container can reach. Use 0.0.0.0:9731 and 0.0.0.0:9732.

ARG RUST_VERSION=1.95
# Where the root filesystem comes from: `build` (compiled here) or `prebuilt`
# (a `rootfs/` directory in the build context).
ARG ROOTFS_FROM=build

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
COPY src ./src
COPY benches ./benches
COPY scripts/container-rootfs ./scripts/container-rootfs
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin queue-exporter \
 && scripts/container-rootfs target/release/queue-exporter /rootfs

FROM scratch AS prebuilt
COPY rootfs /rootfs

FROM ${ROOTFS_FROM} AS rootfs

FROM scratch AS runtime
ARG VERSION=0.1.0
# Set both when publishing: the project declares no licence or repository URL
# yet, and a label that guessed would be worse than one that says so.
ARG SOURCE_URL=""
ARG LICENSES=NOASSERTION
COPY --from=rootfs /rootfs/ /
LABEL org.opencontainers.image.title="queue-exporter" \
      org.opencontainers.image.description="Prometheus exporter and KEDA external scaler for Redis and RabbitMQ work queues" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="${LICENSES}"
USER 65532:65532
# 9731: /metrics, /healthz, /readyz. 9732: the KEDA external scaler (gRPC).
EXPOSE 9731 9732
ENTRYPOINT ["/usr/local/bin/queue-exporter"]
CMD ["--config", "/etc/queue-exporter/config.yaml"]
