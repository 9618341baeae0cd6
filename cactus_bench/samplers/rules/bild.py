"""BiLD's rollback test (Kim et al., NeurIPS 2023; kssteven418/BigLittleDecoder, modeling_t5.py).

The verifier rolls back a drafted token when its cross-entropy under the verifier's logits
exceeds tau_RB, and replaces it with the verifier's argmax (docs/rules.md, F6):

    a(v) = 1[-log q_bar(v) <= tau] = 1[q_bar(v) >= exp(-tau)],     r = one-hot(argmax q)

so the law is p 1[S] + (1 - p(S)) 1[argmax q]. The source reads the verifier's raw logits
(test_law=unscaled); the default tau = 5 is the code's (README: "normally 2~5"). BiLD's other
threshold (the drafter stops when max p < 0.6) sets the draft length, not verification.
"""

from __future__ import annotations

import math

from cactus_bench.samplers.params import TEST_LAW, Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder


class Bild(Builder):
    info = RuleInfo(
        "bild",
        "BiLD rollback: accept iff -log q(n) <= tau, else emit argmax q",
        (Param("tau", float, "rollback threshold tau_RB in nats", low=0.0), TEST_LAW),
    )
    deterministic_accept = True

    def __init__(self, tau: float = 5.0, test_law: str = "unscaled"):
        self._store(tau=tau, test_law=test_law)

    def plan(self, p, q, p_bar, q_bar):
        import torch  # lazy: keeps torch out of the catalogue

        accept = (q_bar >= math.exp(-self.tau)).to(p.dtype)
        argmax = torch.zeros_like(q).scatter_(-1, q.argmax(-1, keepdim=True), 1.0)
        return accept, argmax


BUILDERS = (Bild,)
