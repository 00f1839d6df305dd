"""Words a question is made of that say nothing about its topic.

They are dropped from a query's ranking terms (never from a quoted phrase, never from
the index): in BM25 a common word still scores, and in a short question whose topic
words are rare, "the", "of" and "how" decided which page came first. The benchmark in
`benchmarks/retrieval.py` measures the effect of each list.

English: the function words of the Snowball English stop list, plus the words a
question starts with. Chinese: particles, pronouns and question words as jieba cuts
them in accurate mode; content verbs (设置, 使用) stay, they name what is asked.
"""

_ENGLISH = """
    a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during
    each few for from further had has have having he her here hers herself him
    himself his how i if in into is it its itself just me more most my myself no nor
    not now of off on once only or other ought our ours ourselves out over own same
    she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when
    where which while who whom why will with would you your yours yourself
    yourselves s t don isn aren wasn weren doesn didn won wouldn shouldn couldn
    let get got want need way ways something anything
    thing things possible also use using used
"""

_CHINESE = """
    的 了 吗 呢 吧 啊 呀 么 嘛 着 过 地 得 是 在 和 与 及 或 或者 并 而 也 都 就 还 又
    我 我们 你 你们 他 她 它 他们 它们 这 那 这个 那个 这些 那些 这样 那样 这种 那种
    一个 一种 一下 一些 某个 什么 怎么 怎样 怎么样 如何 为什么 为何 哪 哪些 哪个 哪里
    能 能否 能不能 可以 可不可以 是否 是不是 有没有 会 会不会 要 想 应该 该 把 被 让
    给 对 从 到 向 用 于 以 之 其 所 为 时 时候 请问 请 有 没有 不 上 中 里 下
"""
ENGLISH, CHINESE = frozenset(_ENGLISH.split()), frozenset(_CHINESE.split())


def is_stopword(word: str) -> bool:
    """In a list, and not written in capitals (IT, GET, US name things)."""
    if len(word) > 1 and word.isupper():
        return False
    lowered = word.lower()
    return lowered in ENGLISH or lowered in CHINESE
