"""The adaptive tree size: speculate when drafts are accepted and verification is cheap, decode
plainly when they are not, and recover from a bad cost measurement."""

from draftscope.engine.budget import AdaptiveBudget

CPU_LIKE = {0: 0.060, 4: 0.080, 8: 0.090, 16: 0.100, 32: 0.130, 64: 0.190}


def test_good_drafts_grow_the_tree_and_bad_ones_stop_speculation():
    b = AdaptiveBudget(dict(CPU_LIKE))
    for _ in range(20):
        n = b.choose()
        b.update(n, accepted=min(n, 6))  # nearly everything accepted
    assert b.choose() >= 16
    late = []
    for _ in range(40):
        n = b.choose()
        b.update(n, accepted=0)
        late.append(n)
    # Plain decoding, but for the periodic exploration step.
    assert late[-16:].count(0) >= 14, f"speculation that never pays falls back to plain decoding: {late}"


def test_plain_decoding_still_explores_and_costs_recover_from_a_spike():
    spiked = {n: (c if n == 0 else c * 4) for n, c in CPU_LIKE.items()}  # measured while the machine was busy
    b = AdaptiveBudget(spiked, alpha=0.8, explore_every=4)
    chosen = []
    for _ in range(40):
        n = b.choose()
        chosen.append(n)
        b.update(n, accepted=min(n, 4), seconds=CPU_LIKE[min(CPU_LIKE, key=lambda k: abs(k - n))])
    assert chosen[0] == 0 and any(n > 0 for n in chosen[:8]), "explores despite the spike"
    assert all(n > 0 for n in chosen[-10:]), "real costs learned: speculation resumes"
