"""Job types on the wire (BountyTypeResponse), and the typed reading of their requirement and policy JSON."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from callboard_core.schemas import ApiModel, JsonObject

FileRole = Literal["DELIVERABLE", "PREVIEW"]
MimePattern = Annotated[
    str, StringConstraints(min_length=3, max_length=127, pattern=r"^[a-z0-9.+-]+/(\*|[a-z0-9.+-]+)$")
]


# --- views ---------------------------------------------------------------------------------------


class JobType(ApiModel):
    """BountyTypeResponse: one active job type. Use its `key` as jobTypeKey when creating a job."""

    id: str
    key: str
    display_name: str
    description: str | None
    capability_tag_id: str | None
    artifact_schema_json: JsonObject = Field(
        description="JSON Schema (draft 2020-12) that a submission's structuredPayloadJson must satisfy."
    )
    review_packet_schema_json: JsonObject = Field(
        description="JSON Schema (draft 2020-12) of the payload preview the requester sees before the award."
    )
    submission_requirements_json: JsonObject = Field(
        description="artifactTypes (allowed artifactType values), minDeliverableFiles, maxFiles and "
        "allowedMimeTypes (null: any) for a submission's files."
    )
    preview_policy_json: JsonObject = Field(
        description="previewFields (payload fields shown before the award), maxPreviewChars (longer strings "
        "are cut), maxPreviewItems (longer arrays are cut) and previewFileRoles (file roles shown before award)."
    )
    active: bool


class JobTypeList(ApiModel):
    job_types: list[JobType]


# --- the JSON columns, parsed (seed checks them; the service reads them) -------------------------


class SubmissionRequirements(ApiModel):
    artifact_types: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=64)]], Field(min_length=1)
    ]
    min_deliverable_files: Annotated[int, Field(ge=0)] = 0
    max_files: Annotated[int, Field(ge=0)]
    allowed_mime_types: list[MimePattern] | None = None  # None: any type; "image/*" covers a family


class PreviewPolicy(ApiModel):
    preview_fields: list[str]
    max_preview_chars: Annotated[int, Field(ge=1)]
    max_preview_items: Annotated[int, Field(ge=1)] = 20
    preview_file_roles: list[FileRole] = Field(default_factory=lambda: list[FileRole](["PREVIEW"]))
