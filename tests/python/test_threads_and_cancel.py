"""Several Python threads on one pipeline (each call its own result, the GIL released meanwhile;
with max_batch their calls share one transformer call), and cancellation: a callback raising
KeyboardInterrupt, Ctrl-C (SIGINT) sent from another thread, an error in a callback; each stops
the call at the next step and leaves the pipeline usable."""

import _thread
import os
import signal
import threading
import time

import numpy as np
import pytest

import fluxrt

# Enough steps for a cancel to land mid-loop (it is checked between steps, and the callbacks that
# raise do so at steps 0 and 1), few enough that the file stays well inside ctest's 600 s with 4
# busy loops on 2 cores (each demo step then takes seconds): 12 took 600 s there.
STEPS = 6
ARGS = dict(height=64, width=64, num_inference_steps=STEPS, max_sequence_length=64)


def pixels(out):
    return np.asarray(out.images[0]).copy()


def test_two_threads_on_one_pipeline(demo):
    alone = {seed: pixels(demo("a red circle", generator=seed, **ARGS)) for seed in (1, 2)}
    results, errors = {}, []
    ticks = []

    def worker(seed):
        try:
            results[seed] = pixels(demo("a red circle", generator=seed, **ARGS))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    # The GIL is released while the engine works: this thread keeps running meanwhile.
    while any(t.is_alive() for t in threads):
        ticks.append(time.monotonic())
        time.sleep(0.001)
    for t in threads:
        t.join()
    assert not errors
    for seed in (1, 2):
        assert np.array_equal(results[seed], alone[seed])
    assert len(ticks) > 1


def test_four_threads_share_one_transformer_call(demo):
    # The window only bounds the wait: the call starts once the four images are queued.
    pipe = fluxrt.FluxPipeline.from_pretrained(max_batch=4, batch_window_ms=120_000)
    pipe.set_progress_bar_config(disable=True)
    args = dict(ARGS, num_inference_steps=2)
    prompts = {21: "a red circle", 22: "a green star", 23: "a blue square", 24: "a red circle"}
    results, errors = {}, []

    def worker(seed):
        try:
            results[seed] = pipe(prompts[seed], generator=seed, **args)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for seed, prompt in prompts.items():
        out = results[seed]
        assert out.timings["batch_images"] == 4, seed  # the engine call held all four threads' images
        assert out.images[0].info["seed"] == str(seed)
        alone = demo(prompt, generator=seed, **args)
        assert alone.timings["batch_images"] == 1
        assert np.array_equal(pixels(out), pixels(alone)), seed
    assert pipe._scheduler.stats()["batches"] == {4: 1}


def test_keyboard_interrupt_in_a_callback_cancels_at_the_next_step(demo):
    steps = []

    def callback(pipe, step, timestep, kwargs):
        steps.append(step)
        if step == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        demo("a red circle", generator=1, callback_on_step_end=callback, **ARGS)
    assert steps == [0, 1]
    assert len(demo("a red circle", generator=1, **ARGS).images) == 1


def test_an_error_in_a_callback_is_raised_and_cancels(demo):
    steps = []

    def callback(pipe, step, timestep, kwargs):
        steps.append(step)
        raise ZeroDivisionError("from the callback")

    with pytest.raises(ZeroDivisionError, match="from the callback"):
        demo("a red circle", generator=1, callback_on_step_end=callback, **ARGS)
    assert steps == [0]


@pytest.mark.parametrize("how", ["sigint", "interrupt_main"])
def test_ctrl_c_from_another_thread_cancels(demo, how):
    reference = pixels(demo("a red circle", generator=4, **ARGS))
    started = threading.Event()
    steps = []

    def callback(pipe, step, timestep, kwargs):
        steps.append(step)
        started.set()
        time.sleep(0.02)  # long enough steps for the interrupt to land mid-loop

    def interrupt():
        started.wait()
        if how == "sigint":
            os.kill(os.getpid(), signal.SIGINT)
        else:
            _thread.interrupt_main()

    killer = threading.Thread(target=interrupt)
    killer.start()
    with pytest.raises(KeyboardInterrupt):
        demo("a red circle", generator=4, callback_on_step_end=callback, **ARGS)
    killer.join()
    assert 1 <= len(steps) < STEPS
    # usable afterwards, with the same images as before
    assert np.array_equal(pixels(demo("a red circle", generator=4, **ARGS)), reference)


def test_a_cancelled_call_does_not_disturb_another_thread(demo):
    reference = pixels(demo("a red circle", generator=8, **ARGS))
    result = {}

    def worker():
        result["image"] = pixels(demo("a red circle", generator=8, **ARGS))

    def callback(pipe, step, timestep, kwargs):
        if step == 0:
            raise KeyboardInterrupt

    t = threading.Thread(target=worker)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        demo("a red circle", generator=9, callback_on_step_end=callback, **ARGS)
    t.join()
    assert np.array_equal(result["image"], reference)
    assert isinstance(fluxrt.CancelledError("x"), RuntimeError)
