FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p elfgate-server

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates bash \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/elfgate /usr/local/bin/elfgate
VOLUME /data
EXPOSE 7420
ENTRYPOINT ["elfgate", "serve"]
