"""Image workload for locust: uploads of image-sized objects and reads of them at 1:9.

    pip install -e '.[load]'
    locust -f loadtests/locustfile.py --headless -u 32 -r 8 -t 60s --host http://127.0.0.1:8080

Each simulated user authenticates once (tempauth v1: GET {host}/auth/v1.0), creates its own
container, seeds a few uploads, then loops: 9 GETs of objects it uploaded for every PUT.
Sizes follow bench.image_size (most near 64 KiB, a tail to 1 MiB). Environment:
SWIFT_USER (test:tester), SWIFT_KEY (testing), SWIFT_AUTH_PATH (/auth/v1.0),
LOAD_SEED_OBJECTS (5).
"""

from __future__ import annotations

import os
import random
import sys
import uuid

from locust import HttpUser, constant, task

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import image_size  # noqa: E402  (a sibling module, found via the line above)

USER = os.environ.get("SWIFT_USER", "test:tester")
KEY = os.environ.get("SWIFT_KEY", "testing")
AUTH_PATH = os.environ.get("SWIFT_AUTH_PATH", "/auth/v1.0")
SEED_OBJECTS = int(os.environ.get("LOAD_SEED_OBJECTS", "5"))
PAYLOAD = os.urandom(1024 * 1024)  # sliced per upload; content does not matter to the server


class ImageUser(HttpUser):
    wait_time = constant(0)  # closed loop: -u is the concurrency

    def on_start(self) -> None:
        self.rng = random.Random()
        r = self.client.get(AUTH_PATH, headers={"X-Auth-User": USER, "X-Auth-Key": KEY},
                            name="auth")
        r.raise_for_status()
        self.storage_url = r.headers["X-Storage-Url"].rstrip("/")
        self.headers = {"X-Auth-Token": r.headers["X-Auth-Token"]}
        self.container = f"locust-{uuid.uuid4().hex[:12]}"
        self.client.put(f"{self.storage_url}/{self.container}", headers=self.headers,
                        name="PUT container").raise_for_status()
        self.sizes: dict[str, int] = {}
        self.names: list[str] = []
        for _ in range(SEED_OBJECTS):
            self.upload()

    @task(1)
    def upload(self) -> None:
        size = image_size(self.rng)
        name = f"img/{uuid.uuid4().hex}.jpg"
        headers = {**self.headers, "Content-Type": "image/jpeg"}
        with self.client.put(f"{self.storage_url}/{self.container}/{name}",
                             data=PAYLOAD[:size], headers=headers, name="PUT image",
                             catch_response=True) as r:
            if r.status_code != 201:
                r.failure(f"PUT {r.status_code}")
                return
            r.success()
        self.sizes[name] = size
        self.names.append(name)

    @task(9)
    def read(self) -> None:
        if not self.names:
            self.upload()
            return
        name = self.rng.choice(self.names)
        with self.client.get(f"{self.storage_url}/{self.container}/{name}",
                             headers=self.headers, name="GET image",
                             catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"GET {r.status_code}")
            elif len(r.content) != self.sizes[name]:
                r.failure(f"short body {len(r.content)}/{self.sizes[name]}")
            else:
                r.success()
