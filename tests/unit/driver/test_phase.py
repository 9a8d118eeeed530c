"""phase.json (launcher/driver/records/phase.py): written once a phase is entered, replaced whole on
each entry, and named by a preemption signal's message."""
import json
import os
import signal
import time

from launcher.driver.loop.preemption import Preemption
from launcher.driver.records.phase import PHASE_FILE, RunPhase


def test_each_phase_entered_replaces_phase_json(tmp_path):
    phase = RunPhase(tmp_path)
    assert not (tmp_path / PHASE_FILE).exists()  # a run refused before Ray leaves no trace
    phase.enter("start-up")
    assert json.loads((tmp_path / PHASE_FILE).read_text())["phase"] == "start-up"
    phase.enter("sync", 5)
    row = json.loads((tmp_path / PHASE_FILE).read_text())
    assert (row["step"], row["phase"]) == (5, "sync") and abs(row["started_unix_s"] - time.time()) < 60
    assert os.listdir(tmp_path) == [PHASE_FILE]  # the scratch file was renamed over it
    assert phase.describe() == "step 5's sync"
    phase.enter("loop")
    assert phase.describe() == "the loop"


def test_the_first_signal_names_the_phase_it_arrived_in(tmp_path, capsys):
    phase = RunPhase(tmp_path)
    preemption = Preemption([signal.SIGUSR1], grace_s=10.0, save_s=4.0, basis="test", phase=phase)
    with preemption.installed():
        preemption.running = True
        phase.enter("train", 3)
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)  # the handler runs at the next bytecode boundary
    assert "SIGUSR1 received in step 3's train: the step in flight finishes" in capsys.readouterr().err
