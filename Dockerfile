# syntax=docker/dockerfile:1
# The one tokenserve binary (serve, gateway, keys, usage, ... as subcommands) on Debian 12.
#   docker build -t tokenserve .
#   docker run -p 8000:8000 -v $PWD/models:/models:ro tokenserve \
#       serve -m /models/model.gguf --host 0.0.0.0 --port 8000 --no-auth
#   docker run -p 8080:8080 -v $PWD/gw:/etc/tokenserve:ro tokenserve \
#       gateway --endpoints /etc/tokenserve/endpoints.yaml --host 0.0.0.0 --port 8080 ...
# The build stage's packages are scripts/setup.sh's; the runtime stage installs exactly the
# shared libraries the binary links (tests/scaleout/dockerfile_test.sh checks both against
# the real binary). Kubernetes: deploy/k8s uses this image (readiness /ready, SIGTERM drain).

FROM debian:bookworm AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev \
      libboost-dev libboost-system-dev nlohmann-json3-dev libpcre2-dev \
      libsqlite3-dev libpq-dev libhiredis-dev libcurl4-openssl-dev libcli11-dev libtomlplusplus-dev \
      libspdlog-dev libfmt-dev ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY src ./src
COPY tests ./tests
# Release build of the binary only (CMake configures the tests, which need GoogleTest, but only
# `tokenserve` is built). The kernels pick AVX2/AVX-512 at run time: the image runs on any x86-64.
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTS_BUILD_BENCH=OFF \
    && ninja -C build tokenserve \
    && strip build/tokenserve

FROM debian:bookworm-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libcurl4 libhiredis0.14 libpcre2-8-0 libpq5 libsqlite3-0 libstdc++6 libtomlplusplus3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/tokenserve --create-home tokenserve
COPY --from=build /src/build/tokenserve /usr/local/bin/tokenserve
USER 10001:10001
WORKDIR /var/lib/tokenserve
EXPOSE 8000
# serve and gateway drain on SIGTERM (in-flight requests finish, then exit 0). No HEALTHCHECK:
# the slim image has no HTTP client; orchestrators probe /health and /ready themselves.
STOPSIGNAL SIGTERM
ENTRYPOINT ["tokenserve"]
CMD ["serve", "--help"]
