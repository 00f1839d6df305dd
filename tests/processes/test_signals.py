"""The first SIGINT stops a worker, a relay or a follower at its next safe point,
whatever the main thread is doing when it arrives: a stop handler that took the stop
event's lock hung a relay that was inside `stop.wait()` (holding it) at that moment."""

import subprocess
import sys
import textwrap

# Fifty stop requests, each at a moment of its own while the main thread polls the stop
# event in a tight loop, inside the event's lock most of the time: the old handler hung
# within a few rounds.
WAITER = textwrap.dedent(
    """
    import os, random, signal, threading
    from kb_cli.worker import stop_on_signals

    told = []
    for round_ in range(50):
        stop = threading.Event()
        with stop_on_signals(stop, told.append):
            sender = threading.Timer(
                random.uniform(0.001, 0.02), os.kill, (os.getpid(), signal.SIGINT)
            )
            sender.start()
            while not stop.wait(0):
                pass
            sender.join()
    assert told == ["SIGINT"] * 50, told
    print("stopped 50 times")
    """
)


def test_a_stop_request_arriving_inside_the_stop_wait_is_not_lost():
    done = subprocess.run(
        [sys.executable, "-c", WAITER], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "stopped 50 times\n"


# A parse server is forked while a worker runs: its copy of the signal pipe must not
# keep the worker from ending.
WITH_A_CHILD = textwrap.dedent(
    """
    import os, signal, threading, time
    from kb_cli.worker import stop_on_signals

    with stop_on_signals(threading.Event(), print):
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
    print("ended")
    os.kill(child, signal.SIGKILL)
    """
)


def test_a_child_forked_within_the_block_does_not_hold_its_end():
    done = subprocess.run(
        [sys.executable, "-c", WITH_A_CHILD], capture_output=True, text=True, timeout=30
    )
    assert (done.returncode, done.stdout) == (0, "ended\n"), done.stderr
