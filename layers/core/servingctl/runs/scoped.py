"""One benchmark run's AWS access: the stores a bench worker step or benchmark task uses for a run,
on credentials of BenchRunRole assumed with the session tags run=<run id> and profile=<profile>.

template.yaml grants BenchRunRole only what names those tags: the run's partition, its profile's
record (the hold) and the records under runs/<run id>/. The worker's and the task's own roles have no
table or bucket access, so a step working on one run cannot write another's items or objects nor
another profile's record. A step that knows only the run id (a scenario, shard or merge event) first
reads the run with a run-only session (no profile tag: no profile access) to learn its profile.
Sessions are kept per run and refreshed by botocore before they expire (role chaining: one hour).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import boto3
import botocore.session
from botocore.credentials import CredentialProvider, RefreshableCredentials

if TYPE_CHECKING:
    from types_boto3_sts.type_defs import TagTypeDef

from servingctl.store import DynamoStore
from servingctl.store.base import Store
from servingctl.store.benchmarks import BenchmarkStore
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl.store.records import RecordStore, S3RecordStore

# The most a role-chained session lasts (AWS's cap); botocore refreshes 15 minutes before its end.
SESSION_S = 3600
# Sessions kept per container: runs come one after another; a few cover retries and late steps.
KEPT_SESSIONS = 8


class _Given(CredentialProvider):
    """A credential provider that answers the credentials it was given (a run's assumed session)."""

    METHOD = "servingctl-run-session"

    def __init__(self, credentials: RefreshableCredentials) -> None:
        super().__init__()
        self._given = credentials

    def load(self) -> RefreshableCredentials:
        """The given credentials."""
        return self._given


def session_tags(run_id: str, profile: str | None) -> list[TagTypeDef]:
    """The session tags BenchRunRole's policy names (profile left out when not known yet)."""
    tags: list[TagTypeDef] = [{"Key": "run", "Value": run_id}]
    if profile:
        tags.append({"Key": "profile", "Value": profile})
    return tags


def session_name(run_id: str) -> str:
    """A RoleSessionName for the run (CloudTrail shows it): its id in STS's alphabet, 64 at most."""
    return re.sub(r"[^\w+=,.@-]", "-", f"bench-{run_id}")[:64]


class RunScopes:
    """Stores limited to one run, on BenchRunRole sessions tagged with that run."""

    def __init__(self, role_arn: str, table: str, bucket: str, sts: Any | None = None) -> None:
        self.role_arn, self.table, self.bucket = role_arn, table, bucket
        self._sts = sts or boto3.client("sts")
        self._sessions: OrderedDict[tuple[str, str | None], boto3.Session] = OrderedDict()
        self._profiles: dict[str, str] = {}

    def _credentials(self, run_id: str, profile: str | None) -> dict[str, str]:
        answer = self._sts.assume_role(
            RoleArn=self.role_arn,
            RoleSessionName=session_name(run_id),
            DurationSeconds=SESSION_S,
            Tags=session_tags(run_id, profile),
        )["Credentials"]
        return {
            "access_key": answer["AccessKeyId"],
            "secret_key": answer["SecretAccessKey"],
            "token": answer["SessionToken"],
            "expiry_time": answer["Expiration"].isoformat(),
        }

    def session(self, run_id: str, profile: str | None) -> boto3.Session:
        """A boto3 session on BenchRunRole tagged with the run (and its profile), kept and refreshed."""
        key = (run_id, profile)
        if key not in self._sessions:
            credentials = RefreshableCredentials.create_from_metadata(
                self._credentials(run_id, profile), lambda: self._credentials(run_id, profile), "sts-assume-role"
            )
            core = botocore.session.get_session()
            # A provider first in botocore's chain: its public way to hand a session refreshable credentials.
            core.get_component("credential_provider").insert_before("env", _Given(credentials))
            self._sessions[key] = boto3.Session(botocore_session=core)
            while len(self._sessions) > KEPT_SESSIONS:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        return self._sessions[key]

    def profile_of(self, run_id: str) -> str | None:
        """The run's profile, read once with a run-only session (None when the run is not recorded)."""
        if run_id not in self._profiles:
            run = DynamoBenchmarkStore(self.table, self.session(run_id, None).resource("dynamodb")).get_run(run_id)
            if run is None:
                return None
            self._profiles[run_id] = run.profile
        return self._profiles[run_id]

    def __call__(self, run_id: str, profile: str | None) -> tuple[BenchmarkStore, RecordStore, Store]:
        """The run's stores: runs and results, records, and profile state (its profile's record only)."""
        profile = profile or self.profile_of(run_id)
        session = self.session(run_id, profile)
        resource = session.resource("dynamodb")
        return (
            DynamoBenchmarkStore(self.table, resource),
            S3RecordStore(self.bucket, session.client("s3")),
            DynamoStore(self.table, resource),
        )
