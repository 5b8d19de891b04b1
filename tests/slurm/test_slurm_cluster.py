"""The real-Slurm fixture itself: a batch job runs on the private one-node cluster and writes its
output; a requeueable job is requeued by slurmctld; slurmctld stopped and started keeps its jobs."""

from __future__ import annotations

from cluster import SlurmCluster, slurm_cluster  # noqa: F401  (the fixture)


def test_cluster_runs_a_batch_job_and_requeues(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    c = slurm_cluster
    assert c.node_state() == "idle"
    done = c.sbatch("--wrap", "echo hello from $SLURM_JOB_ID", "-o", "out-%j.txt")
    c.wait_until(lambda: done not in c.jobs(), 30, "first job done")
    assert (c.dir / f"out-{done}.txt").read_text().strip() == f"hello from {done}"

    job = c.sbatch("--requeue", "--wrap", "sleep 300", "-o", "/dev/null")
    c.wait_until(lambda: c.jobs().get(job) == "RUNNING", 30, "job running")
    assert c.job_field(job, "Requeue") == "1"
    c.stop_ctld()
    c.start_ctld()
    assert c.jobs().get(job) == "RUNNING"  # slurmctld's state survives its restart
    c.run("scontrol", "requeue", str(job))
    c.wait_until(lambda: int(c.job_field(job, "Restarts") or 0) == 1, 30, "requeued")
