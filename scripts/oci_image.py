#!/usr/bin/env python3
"""Writes ingot's container image as an OCI image layout, without a container daemon.

The image is one layer: the ingot binary as /ingot, the shared libraries it links (read with
ldd, at their own paths), the CA bundle for TLS, and /etc/passwd and /etc/group naming the
non-root user 65532. Every file time is SOURCE_DATE_EPOCH (default 0), owners are root, entries
are sorted and gzip carries no time, so the same inputs give the same digests.

usage: oci_image.py --binary PATH --out DIR --version V [--revision R] [--tag T]
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

USER_ID = 65532
CA_BUNDLES = ["/etc/ssl/certs/ca-certificates.crt"]


def shared_libraries(binary):
    """The absolute paths of the libraries the binary loads, the dynamic loader included."""
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    paths = []
    for line in out.splitlines():
        match = re.search(r"(/\S+) \(0x", line)
        if match:
            paths.append(match.group(1))
    return sorted(set(paths))


def tar_entry(name, data=None, mode=0o644, directory=False, mtime=0):
    info = tarfile.TarInfo(name)
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if directory:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        return info, None
    info.mode = mode
    info.size = len(data)
    return info, io.BytesIO(data)


def layer(binary, mtime):
    """The root filesystem as an uncompressed tar, and the paths it holds."""
    files = {"ingot": (open(binary, "rb").read(), 0o755)}
    for path in shared_libraries(binary):
        files[path.lstrip("/")] = (open(os.path.realpath(path), "rb").read(), 0o755)
    for bundle in CA_BUNDLES:
        if os.path.exists(bundle):
            files[bundle.lstrip("/")] = (open(bundle, "rb").read(), 0o644)
    files["etc/passwd"] = (f"nonroot:x:{USER_ID}:{USER_ID}:nonroot:/:/sbin/nologin\n".encode(), 0o644)
    files["etc/group"] = (f"nonroot:x:{USER_ID}:\n".encode(), 0o644)
    directories = {"tmp"}
    for name in files:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            directories.add("/".join(parts[:i]))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(directories | set(files)):
            if name in files:
                data, mode = files[name]
                info, body = tar_entry(name, data, mode, mtime=mtime)
            else:
                info, body = tar_entry(name, directory=True, mtime=mtime)
            tar.addfile(info, body)
    return buffer.getvalue(), sorted(files)


def write_blob(out, data):
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(out, "blobs", "sha256", digest)
    with open(path, "wb") as f:
        f.write(data)
    return f"sha256:{digest}", len(data)


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--revision", default="")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))

    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(os.path.join(args.out, "blobs", "sha256"))

    rootfs, paths = layer(args.binary, mtime)
    diff_id = "sha256:" + hashlib.sha256(rootfs).hexdigest()
    layer_digest, layer_size = write_blob(args.out, gzip.compress(rootfs, compresslevel=6, mtime=0))

    labels = {
        "org.opencontainers.image.title": "ingot",
        "org.opencontainers.image.description": "Lifecycle of bare-metal Kubernetes and Harvester nodes",
        "org.opencontainers.image.version": args.version,
        "org.opencontainers.image.source": "ingot" + (f" (git {args.revision})" if args.revision else ""),
        "org.opencontainers.image.revision": args.revision,
    }
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": f"{USER_ID}:{USER_ID}",
            "Entrypoint": ["/ingot"],
            "Cmd": ["run"],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_digest, config_size = write_blob(args.out, canonical(config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": layer_size,
            }
        ],
        "annotations": labels,
    }
    manifest_digest, manifest_size = write_blob(args.out, canonical(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {"org.opencontainers.image.ref.name": args.tag or args.version},
            }
        ],
    }
    with open(os.path.join(args.out, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(args.out, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))
    print(json.dumps({"manifest": manifest_digest, "layer": layer_digest, "files": paths}))


if __name__ == "__main__":
    sys.exit(main())
