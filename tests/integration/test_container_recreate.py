"""A container deleted and created again starts clean: no ACL, key or metadata of the old one
survives (a reader granted access to the old container must not read the new one)."""

from __future__ import annotations

import uuid

import pytest
import swiftclient
from swiftclient.exceptions import ClientException


def test_recreated_container_forgets_acls_and_metadata(cluster):
    owner = cluster.connection()
    other = cluster.connection("test2:tester2", "testing2")
    cont = f"again-{uuid.uuid4().hex[:8]}"
    owner.put_container(cont, headers={"X-Container-Read": "test2:tester2",
                                       "X-Container-Meta-Colour": "red"})
    owner.put_object(cont, "o", b"old")
    url = owner.get_auth()[0]
    tok2 = other.get_auth()[1]  # test2 reads the owner's container through its URL
    assert swiftclient.get_object(url, tok2, cont, "o")[1] == b"old"
    owner.delete_object(cont, "o")
    owner.delete_container(cont)
    owner.put_container(cont)
    owner.put_object(cont, "o", b"new secret")
    head = owner.head_container(cont)
    assert "x-container-read" not in head and "x-container-meta-colour" not in head
    with pytest.raises(ClientException) as exc:
        swiftclient.get_object(url, tok2, cont, "o")
    assert exc.value.http_status == 403
