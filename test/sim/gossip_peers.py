"""gossip_peers.py — the gossip methods' peer draw re-implemented in Python for the sim tests'
reference schedules (test_sim_gossip.sh, test_sim_gossip_async.sh): peer_of(seed, p, i, s) is
src/methods/gossip_sim.c's gossip_peer_of, node i's peer at step s among p nodes, through
src/util/util.h's seed_mix (splitmix64), rng_seed (xoshiro256** seeded by splitmix64) and
rng_below (Lemire's bounded draw). Import it with sys.path.insert(0, "test/sim") from the
repository root."""
M = (1 << 64) - 1


def splitmix(x):
    x = (x + 0x9e3779b97f4a7c15) & M
    z = x
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
    return x, z ^ (z >> 31)


def seed_mix(a, b):
    _, z = splitmix(a)
    _, z = splitmix(z ^ b)
    return z


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M


def below(seed, n):  # rng_seed + rng_below (xoshiro256**, Lemire)
    s, x = [], seed
    for _ in range(4):
        x, z = splitmix(x)
        s.append(z)

    def u64():
        r = (rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45)
        return r
    m = u64() * n
    if (m & M) < n:
        t = (-n) % n
        while (m & M) < t:
            m = u64() * n
    return m >> 64


def peer_of(seed, p, i, s):  # gossip_peer_of
    j = below(seed_mix(seed_mix(seed ^ 0x676f73736970, s), i), p - 1)
    return j + 1 if j >= i else j
