"""The object_storage role's round trip (roles/object_storage/files/s3_probe.py), without boto3.

boto3 is in the hosts' tools venv, not in gpuprov's: the tests stand in for the few names the
probe uses (botocore.exceptions.ClientError/BotoCoreError, boto3.session.Session,
botocore.config.Config) and for the S3 endpoint, an in-memory bucket store that answers with
the error codes and messages S3 sends (AWS S3 API reference, "Error responses";
BucketAlreadyOwnedByYou is what MinIO and S3 outside us-east-1 answer a second create).
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import types
from typing import Any

import pytest
import s3_probe as probe  # roles/object_storage/files/ (pythonpath)

LAB_URL = "http://10.0.0.5:5000"
PROFILE = {
    "name": "lab-a",
    "endpoint_url": LAB_URL,
    "region": "eu-west-1",
    "addressing_style": "path",
    "verify_tls": True,
    "ca_bundle": "",
    "probe_bucket": "probe",
    "create_bucket": False,
    "prefix": "gpuprov-probe/",
    "host": "lab-k40m",
}
AWS = {"name": "aws", "probe_bucket": "b", "region": "", "endpoint_url": ""}  # boto3's defaults
# AWS's documented example key pair (the scan allows this line: a test fixture).
KEYS = {
    "access_key": "AKIAEXAMPLE",
    "secret_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # secret-scan: allow
}


class ClientError(Exception):
    """botocore.exceptions.ClientError: the parsed error response in .response."""

    def __init__(self, error_response: dict[str, Any], operation_name: str) -> None:
        err = error_response["Error"]
        super().__init__(
            f"An error occurred ({err['Code']}) when calling the {operation_name} operation: "
            f"{err['Message']}"
        )
        self.response = error_response


class BotoCoreError(Exception):
    pass


class EndpointConnectionError(BotoCoreError):
    def __init__(self, endpoint_url: str) -> None:
        super().__init__(f'Could not connect to the endpoint URL: "{endpoint_url}"')


def error(code: str, message: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


ACCESS_DENIED = error("AccessDenied", "Access Denied", "PutObject")


class FakeS3:
    """An S3 endpoint in memory: buckets, objects, and an error per operation on demand."""

    def __init__(self, buckets: tuple[str, ...] = ("probe",)) -> None:
        self.buckets = set(buckets)
        self.objects: dict[tuple[str, str], bytes] = {}
        self.fail: dict[str, Exception] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.corrupt = False
        self.unlisted = False
        self.created_meanwhile = False  # another host creates the bucket after our HEAD

    def _call(self, operation: str, **kwargs: Any) -> None:
        self.calls.append((operation, kwargs))
        if operation in self.fail:
            raise self.fail[operation]

    def head_bucket(self, Bucket: str) -> dict[str, Any]:  # boto3's argument names
        self._call("HeadBucket", Bucket=Bucket)
        if Bucket not in self.buckets:
            raise error("404", "Not Found", "HeadBucket")  # HEAD: no body, the status only
        return {}

    def create_bucket(self, Bucket: str, **kwargs: Any) -> dict[str, Any]:
        self._call("CreateBucket", Bucket=Bucket, **kwargs)
        if self.created_meanwhile or Bucket in self.buckets:
            self.buckets.add(Bucket)
            raise error(
                "BucketAlreadyOwnedByYou",
                "Your previous request to create the named bucket succeeded and you already own "
                "it.",
                "CreateBucket",
            )
        self.buckets.add(Bucket)
        return {"Location": f"/{Bucket}"}

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> dict[str, Any]:
        self._call("PutObject", Bucket=Bucket, Key=Key)
        if Bucket not in self.buckets:
            raise error("NoSuchBucket", "The specified bucket does not exist", "PutObject")
        self.objects[(Bucket, Key)] = Body
        return {"ETag": '"' + hashlib.md5(Body).hexdigest() + '"'}  # noqa: S324  # S3's ETag

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        self._call("GetObject", Bucket=Bucket, Key=Key)
        body = self.objects[(Bucket, Key)]
        # every bit of the last byte flipped: a random payload may end in any byte value
        # (setting it to 0 left one run in 256 uncorrupted, and the test then failed)
        return {"Body": io.BytesIO(body[:-1] + bytes([body[-1] ^ 0xFF]) if self.corrupt else body)}

    def list_objects_v2(self, Bucket: str, Prefix: str) -> dict[str, Any]:
        self._call("ListObjectsV2", Bucket=Bucket, Prefix=Prefix)
        keys = [k for b, k in self.objects if b == Bucket and k.startswith(Prefix)]
        if self.unlisted or not keys:
            return {"KeyCount": 0}  # S3 leaves Contents out when nothing matches
        return {"KeyCount": len(keys), "Contents": [{"Key": k} for k in keys]}

    def delete_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        self._call("DeleteObject", Bucket=Bucket, Key=Key)
        del self.objects[(Bucket, Key)]
        return {}


@pytest.fixture
def botocore(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The botocore names the probe imports (it imports them where it uses them)."""
    exceptions = types.ModuleType("botocore.exceptions")
    exceptions.ClientError = ClientError  # type: ignore[attr-defined]
    exceptions.BotoCoreError = BotoCoreError  # type: ignore[attr-defined]
    package = types.ModuleType("botocore")
    package.exceptions = exceptions  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "botocore", package)
    monkeypatch.setitem(sys.modules, "botocore.exceptions", exceptions)
    return package


@pytest.fixture
def s3(botocore: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> FakeS3:
    fake = FakeS3()
    monkeypatch.setattr(probe, "client", lambda profile, keys: fake)
    return fake


def operations(s3: FakeS3) -> list[str]:
    return [op for op, _ in s3.calls]


def test_a_round_trip_puts_reads_back_lists_and_deletes(s3: FakeS3) -> None:
    result = probe.roundtrip(PROFILE, KEYS)
    assert operations(s3) == ["PutObject", "GetObject", "ListObjectsV2", "DeleteObject"]
    key = s3.calls[0][1]["Key"]
    assert key.startswith("gpuprov-probe/lab-k40m-")
    assert len(key) == len("gpuprov-probe/lab-k40m-") + 32  # a uuid4's hex
    assert s3.objects == {}  # deleted again
    assert result == {
        "profile": "lab-a",
        "endpoint": "http://10.0.0.5:5000",
        "bucket": "probe",
        "verdict": "pass",
        "step": "done",
        "sha256": result["sha256"],
        "bytes": 65536,
        "reason": "put, get (sha256 equal), list, delete",
    }
    assert len(result["sha256"]) == 64


@pytest.mark.parametrize(
    ("region", "configuration"),
    [("eu-west-1", {"LocationConstraint": "eu-west-1"}), ("", None)],
    ids=["named-region", "us-east-1"],
)
def test_a_missing_bucket_is_created_when_asked(
    s3: FakeS3, region: str, configuration: dict[str, str] | None
) -> None:
    s3.buckets.clear()
    result = probe.roundtrip({**PROFILE, "create_bucket": True, "region": region}, KEYS)
    assert result["verdict"] == "pass", result
    assert operations(s3)[:3] == ["HeadBucket", "CreateBucket", "PutObject"]
    create = s3.calls[1][1]
    assert create.get("CreateBucketConfiguration") == configuration


def test_an_existing_bucket_is_not_created_again(s3: FakeS3) -> None:
    assert probe.roundtrip({**PROFILE, "create_bucket": True}, KEYS)["verdict"] == "pass"
    assert operations(s3)[:2] == ["HeadBucket", "PutObject"]


def test_a_bucket_another_host_just_created_is_what_was_asked_for(s3: FakeS3) -> None:
    s3.buckets.clear()
    s3.created_meanwhile = True
    assert probe.roundtrip({**PROFILE, "create_bucket": True}, KEYS)["verdict"] == "pass"
    assert operations(s3)[:3] == ["HeadBucket", "CreateBucket", "PutObject"]


def test_a_bucket_name_someone_else_owns_fails_at_the_create(s3: FakeS3) -> None:
    s3.buckets.clear()
    s3.fail["CreateBucket"] = error(
        "BucketAlreadyExists",
        "The requested bucket name is not available. The bucket namespace is shared by all "
        "users of the system. Please select a different name and try again.",
        "CreateBucket",
    )
    result = probe.roundtrip({**PROFILE, "create_bucket": True}, KEYS)
    assert (result["verdict"], result["step"], result["code"]) == (
        "fail",
        "create bucket",
        "BucketAlreadyExists",
    )
    assert result["reason"] == (
        "profile lab-a at http://10.0.0.5:5000: create bucket failed (BucketAlreadyExists: The "
        "requested bucket name is not available. The bucket namespace is shared by all users of "
        "the system. Please select a different name and try again.)"
    )


def test_a_forbidden_head_leaves_the_refusal_to_the_put(s3: FakeS3) -> None:
    """HEAD answers 403 without a body: not "missing"; the put says why."""
    s3.fail["HeadBucket"] = error("403", "Forbidden", "HeadBucket")
    s3.fail["PutObject"] = ACCESS_DENIED
    result = probe.roundtrip({**PROFILE, "create_bucket": True}, KEYS)
    assert operations(s3) == ["HeadBucket", "PutObject"]
    assert (result["step"], result["code"]) == ("put", "AccessDenied")
    assert result["reason"] == (
        "profile lab-a at http://10.0.0.5:5000: key pair refused during put (AccessDenied: the "
        "key pair is not allowed to use this bucket); check the access_key/secret_key of "
        "object_storage_profiles entry 'lab-a' (Vault)"
    )


def test_another_head_error_is_a_failure_of_the_create_step(s3: FakeS3) -> None:
    s3.fail["HeadBucket"] = error("400", "Bad Request", "HeadBucket")
    result = probe.roundtrip({**PROFILE, "create_bucket": True}, KEYS)
    assert (result["verdict"], result["step"], result["code"]) == ("fail", "create bucket", "400")


def test_a_missing_bucket_without_create_is_named(s3: FakeS3) -> None:
    s3.buckets.clear()
    result = probe.roundtrip(PROFILE, KEYS)
    assert (result["step"], result["code"]) == ("put", "NoSuchBucket")
    assert result["reason"] == (
        "profile lab-a at http://10.0.0.5:5000: bucket 'probe' does not exist; create it or set "
        "create_bucket: true in object_storage_profiles entry 'lab-a'"
    )


def test_a_corrupted_read_back_names_both_digests(s3: FakeS3) -> None:
    s3.corrupt = True
    result = probe.roundtrip(PROFILE, KEYS)
    assert (result["verdict"], result["step"]) == ("fail", "get")
    wrote = hashlib.sha256(next(iter(s3.objects.values()))).hexdigest()
    assert result["reason"].startswith("profile lab-a: read back sha256 ")
    assert result["reason"].endswith(f", wrote {wrote}")
    assert "DeleteObject" not in operations(s3)


def test_an_object_missing_from_the_listing_fails_the_list_step(s3: FakeS3) -> None:
    s3.unlisted = True
    result = probe.roundtrip(PROFILE, KEYS)
    key = s3.calls[0][1]["Key"]
    assert (result["verdict"], result["step"]) == ("fail", "list")
    assert result["reason"] == f"profile lab-a: {key} not listed after put"


def test_an_unreachable_endpoint_names_the_step_and_the_error(s3: FakeS3) -> None:
    s3.fail["PutObject"] = EndpointConnectionError("http://10.0.0.5:5000/probe/x")
    result = probe.roundtrip(PROFILE, KEYS)
    assert "code" not in result
    assert result["reason"] == (
        "profile lab-a at http://10.0.0.5:5000: put failed (EndpointConnectionError: Could not "
        'connect to the endpoint URL: "http://10.0.0.5:5000/probe/x")'
    )


def test_main_reads_the_keys_from_stdin_and_never_prints_them(
    s3: FakeS3, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(KEYS)))
    assert probe.main([json.dumps(PROFILE)]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["verdict"] == "pass"
    assert KEYS["secret_key"] not in out
    assert KEYS["access_key"] not in out
    s3.fail["PutObject"] = ACCESS_DENIED
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(KEYS)))
    assert probe.main([json.dumps(PROFILE)]) == 1
    assert json.loads(capsys.readouterr().out)["code"] == "AccessDenied"


def test_main_without_one_profile_argument_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert probe.main([]) == 2
    assert capsys.readouterr().err == "usage: s3_probe.py PROFILE_JSON < KEYS_JSON\n"


@pytest.mark.parametrize(
    ("profile", "verify", "region", "endpoint", "style"),
    [
        (PROFILE, True, "eu-west-1", LAB_URL, "path"),
        (
            {**PROFILE, "ca_bundle": "/etc/ssl/lab.pem"},
            "/etc/ssl/lab.pem",
            "eu-west-1",
            LAB_URL,
            "path",
        ),
        (
            {**PROFILE, "verify_tls": False, "ca_bundle": "/x.pem"},
            False,
            "eu-west-1",
            LAB_URL,
            "path",
        ),
        (AWS, True, None, None, "auto"),
    ],
    ids=["plain", "ca-bundle", "no-verify", "aws-defaults"],
)
def test_client_follows_the_profile(
    monkeypatch: pytest.MonkeyPatch,
    botocore: types.ModuleType,
    profile: dict[str, Any],
    verify: bool | str,
    region: str | None,
    endpoint: str | None,
    style: str,
) -> None:
    made: dict[str, Any] = {}

    class Session:
        def __init__(self, **kwargs: Any) -> None:
            made["session"] = kwargs

        def client(self, service: str, **kwargs: Any) -> str:
            made["client"] = (service, kwargs)
            return "the client"

    config = types.ModuleType("botocore.config")
    config.Config = lambda **kwargs: kwargs  # type: ignore[attr-defined]
    botocore.config = config  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "botocore.config", config)
    boto3 = types.ModuleType("boto3")
    boto3.session = types.SimpleNamespace(Session=Session)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "boto3", boto3)
    assert probe.client(profile, KEYS) == "the client"
    assert made["session"] == {
        "aws_access_key_id": "AKIAEXAMPLE",
        "aws_secret_access_key": KEYS["secret_key"],
        "region_name": region,
    }
    service, kwargs = made["client"]
    assert (service, kwargs["endpoint_url"], kwargs["verify"]) == ("s3", endpoint, verify)
    assert kwargs["config"] == {
        "s3": {"addressing_style": style},
        "retries": {"max_attempts": 2},
        "connect_timeout": 10,
        "read_timeout": 30,
    }
