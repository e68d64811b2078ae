#!/usr/bin/env python3
"""Round trip of one S3 profile, run by the object_storage role with the tools venv's boto3.

    s3_probe.py PROFILE_JSON < KEYS_JSON

PROFILE_JSON (argv, no secrets): {"name", "endpoint_url", "region", "addressing_style",
"verify_tls", "ca_bundle", "probe_bucket", "create_bucket", "prefix", "host"}.
KEYS_JSON (stdin): {"access_key", "secret_key"}; never printed.

Steps: (create the bucket when asked and missing,) put a probe object of random bytes, read
it back and compare its sha256, list the prefix and find it, delete it. Prints one JSON
document {"profile", "endpoint", "verdict": "pass"|"fail", "step", "reason", ...}; a
refused key pair gives one line naming the profile and endpoint, never a traceback.
Exit 0 on pass, 1 on fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from typing import Any

REFUSED = {
    "InvalidAccessKeyId": "the access key is unknown to the server",
    "SignatureDoesNotMatch": "the secret key does not match the access key",
    "AccessDenied": "the key pair is not allowed to use this bucket",
    "InvalidClientTokenId": "the access key is unknown to the server",
}


def explain(profile: dict[str, Any], step: str, code: str, message: str) -> str:
    """One line naming the profile, the endpoint and what to fix."""
    where = f"profile {profile['name']} at {profile['endpoint_url']}"
    if code in REFUSED:
        return (
            f"{where}: key pair refused during {step} ({code}: {REFUSED[code]}); check the "
            f"access_key/secret_key of object_storage_profiles entry {profile['name']!r} (Vault)"
        )
    if code == "NoSuchBucket":
        return (
            f"{where}: bucket {profile['probe_bucket']!r} does not exist; create it or set "
            f"create_bucket: true in object_storage_profiles entry {profile['name']!r}"
        )
    return f"{where}: {step} failed ({code}: {message})"


def client(profile: dict[str, Any], keys: dict[str, str]) -> Any:
    """The profile's S3 client (endpoint, region, addressing style, TLS as the profile says)."""
    import boto3
    import botocore.config

    verify: bool | str = bool(profile.get("verify_tls", True))
    if verify and profile.get("ca_bundle"):
        verify = str(profile["ca_bundle"])
    return boto3.session.Session(
        aws_access_key_id=keys["access_key"],
        aws_secret_access_key=keys["secret_key"],
        region_name=profile.get("region") or None,
    ).client(
        "s3",
        endpoint_url=profile.get("endpoint_url") or None,
        verify=verify,
        config=botocore.config.Config(
            s3={"addressing_style": profile.get("addressing_style", "auto")},
            retries={"max_attempts": 2},
            connect_timeout=10,
            read_timeout=30,
        ),
    )


def bucket_missing(s3: Any, bucket: str) -> bool:
    """True when HEAD says the bucket does not exist (a 403 has no body to say why: the put
    that follows names the refusal)."""
    import botocore.exceptions

    try:
        s3.head_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError as exc:
        code = str(exc.response["Error"]["Code"])
        if code not in ("403", "404", "NoSuchBucket"):
            raise
        return code != "403"
    return False


def create_bucket(s3: Any, bucket: str, region: str) -> None:
    """Create the bucket. Every host of a play probes the same bucket at once, so another
    host (or a retry of this request) may have created it since the HEAD: S3 and MinIO then
    answer BucketAlreadyOwnedByYou (outside us-east-1), which is what was asked for. A bucket
    another account owns (BucketAlreadyExists) stays an error."""
    import botocore.exceptions

    # S3 wants the region named for any bucket outside us-east-1.
    where = {} if region == "us-east-1" else {"LocationConstraint": region}
    try:
        s3.create_bucket(Bucket=bucket, **({"CreateBucketConfiguration": where} if where else {}))
    except botocore.exceptions.ClientError as exc:
        if exc.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
            raise


def roundtrip(profile: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    import botocore.exceptions

    s3 = client(profile, keys)
    bucket = profile["probe_bucket"]
    key = (
        f"{profile.get('prefix', 'gpuprov-probe/')}{profile.get('host', 'host')}-{uuid.uuid4().hex}"
    )
    body = os.urandom(64 * 1024)
    want = hashlib.sha256(body).hexdigest()
    result: dict[str, Any] = {
        "profile": profile["name"],
        "endpoint": profile.get("endpoint_url"),
        "bucket": bucket,
        "verdict": "fail",
        "step": "connect",
    }
    try:
        if profile.get("create_bucket"):
            result["step"] = "create bucket"
            if bucket_missing(s3, bucket):
                create_bucket(s3, bucket, profile.get("region") or "us-east-1")
        result["step"] = "put"
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        result["step"] = "get"
        got = hashlib.sha256(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest()
        if got != want:
            result["reason"] = f"profile {profile['name']}: read back sha256 {got}, wrote {want}"
            return result
        result["step"] = "list"
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", [])
        if [o["Key"] for o in listed] != [key]:
            result["reason"] = f"profile {profile['name']}: {key} not listed after put"
            return result
        result["step"] = "delete"
        s3.delete_object(Bucket=bucket, Key=key)
    except botocore.exceptions.ClientError as exc:
        err = exc.response.get("Error", {})
        result["code"] = err.get("Code", "?")
        result["reason"] = explain(profile, result["step"], result["code"], err.get("Message", ""))
        return result
    except (botocore.exceptions.BotoCoreError, OSError) as exc:
        result["reason"] = (
            f"profile {profile['name']} at {profile.get('endpoint_url')}: {result['step']} failed "
            f"({type(exc).__name__}: {exc})"
        )
        return result
    result.update(
        {
            "verdict": "pass",
            "step": "done",
            "sha256": want,
            "bytes": len(body),
            "reason": "put, get (sha256 equal), list, delete",
        }
    )
    return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: s3_probe.py PROFILE_JSON < KEYS_JSON", file=sys.stderr)
        return 2
    profile = json.loads(args[0])
    keys = json.loads(sys.stdin.read())
    result = roundtrip(profile, keys)
    print(json.dumps(result))
    return 0 if result["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
