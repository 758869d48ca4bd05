from reachstore_server.query.index.tokenize import tokenize


def test_latin_words_are_casefolded_and_punctuation_is_dropped():
    assert tokenize("Hello, World! (see: README.md)") == ["hello", "world", "see", "readme", "md"]


def test_digits_are_kept_and_underscore_separates():
    assert tokenize("Python 3.11 os.path_join") == ["python", "3", "11", "os", "path", "join"]


def test_nfkc_folds_fullwidth_forms_and_casefold_handles_eszett():
    assert tokenize("ＡＢＣ１２３ Straße") == ["abc123", "strasse"]


def test_accented_european_words_stay_whole():
    assert tokenize("L'été déjà – Ünïcode, Привет мир, αβγ") == [
        "l",
        "été",
        "déjà",
        "ünïcode",
        "привет",
        "мир",
        "αβγ",
    ]


def test_chinese_runs_become_overlapping_bigrams():
    assert tokenize("信息检索") == ["信息", "息检", "检索"]


def test_single_cjk_character_run_is_a_unigram():
    assert tokenize("我 爱 你") == ["我", "爱", "你"]


def test_chinese_punctuation_splits_runs():
    assert tokenize("大熊猫，吃竹子。") == ["大熊", "熊猫", "吃竹", "竹子"]


def test_mixed_chinese_and_latin_are_split_by_script():
    assert tokenize("使用Python编程") == ["使用", "python", "编程"]


def test_japanese_and_korean_runs_become_bigrams():
    assert tokenize("カタカナ") == ["カタ", "タカ", "カナ"]
    assert tokenize("한국어") == ["한국", "국어"]


def test_halfwidth_katakana_is_normalised_to_fullwidth():
    assert tokenize("ｶﾀｶﾅ") == tokenize("カタカナ")


def test_combining_marks_do_not_split_devanagari_words():
    assert tokenize("हिन्दी भाषा") == ["हिन्दी", "भाषा"]


def test_text_without_words_gives_no_tokens():
    assert tokenize("  ...!?  — ，。") == []
    assert tokenize("") == []
