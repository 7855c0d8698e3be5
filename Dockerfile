FROM python:3.11-slim
WORKDIR /opt/swiftlite
COPY pyproject.toml README.md ./
COPY swiftlite ./swiftlite
COPY ringbuilder ./ringbuilder
RUN pip install --no-cache-dir .
VOLUME /data
EXPOSE 8080
CMD ["swiftlite", "up", "--root", "/data", "--bind", "0.0.0.0"]
