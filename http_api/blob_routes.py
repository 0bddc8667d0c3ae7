"""`PUT /blobs/{token}` and `GET /blobs/{token}`: the local blob store's presigned URLs.

Not API routes (not in the spec's table, no credential, no unit of work): the signed token is the whole
authorization. Bodies stream straight to disk, capped by the token's declared size (and, in the body
limit middleware, by `CALLBOARD_MAX_UPLOAD_BYTES` instead of the JSON body cap). With the S3 backend
clients PUT and GET at S3 directly and these routes answer 404.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from callboard_core.blobs import content_disposition
from callboard_core.blobs.local import GetGrant, LocalBlobStore, PutGrant
from callboard_core.container import Core
from callboard_core.errors import NotFound, ValidationFailed

PREFIX = "/blobs/"

# A served upload must never run as a page of this origin: no sniffing, no scripts, no framing.
_SAFE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "private, no-store",
}


def blob_routes(core: Core) -> list[BaseRoute]:
    def local_store() -> LocalBlobStore:
        if not isinstance(core.blobs, LocalBlobStore):
            raise NotFound("No such route.", code="not_found")
        return core.blobs

    async def put_blob(request: Request) -> Response:
        store = local_store()
        grant = store.verify_token(request.path_params["token"], "put")
        assert isinstance(grant, PutGrant)
        declared = request.headers.get("content-length")
        # A declared length other than the granted size fails before a byte is read.
        if declared is not None and declared.isdigit() and int(declared) != grant.size_bytes:
            raise ValidationFailed(
                f"The upload is {declared} bytes; {grant.size_bytes} were declared.",
                code="upload_size_mismatch",
                expected=grant.size_bytes,
                received=int(declared),
            )
        await store.write(grant, request.stream())
        return JSONResponse(
            {"status": "stored", "sizeBytes": grant.size_bytes, "sha256": grant.sha256_hex},
            headers={"ETag": f'"{grant.sha256_hex}"'},
        )

    async def get_blob(request: Request) -> Response:
        store = local_store()
        grant = store.verify_token(request.path_params["token"], "get")
        assert isinstance(grant, GetGrant)
        path, stat = await store.open_for_read(grant)
        headers = {**_SAFE_HEADERS, "Content-Disposition": content_disposition(grant.filename)}
        return FileResponse(path, media_type=grant.content_type, headers=headers, stat_result=stat)

    return [
        Route(PREFIX + "{token}", put_blob, methods=["PUT"], include_in_schema=False),
        Route(PREFIX + "{token}", get_blob, methods=["GET"], include_in_schema=False),
    ]
