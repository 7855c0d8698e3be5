FROM python:3.11-slim
WORKDIR /opt/swiftlite
COPY pyproject.toml README.md ./
COPY swiftlite ./swiftlite
COPY ringbuilder ./ringbuilder
RUN pip install --no-cache-dir .
VOLUME /data
# Only the proxy is public; the storage servers stay on the container's loopback
# (--backend-bind) and answer only requests signed with the generated backend_secret.
EXPOSE 8080
CMD ["swiftlite", "up", "--root", "/data", "--bind", "0.0.0.0", "--backend-bind", "127.0.0.1"]
