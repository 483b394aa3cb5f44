"""Chunk keys of multimodal prompts (strata_vllm.prompt_keys) and the connector's use of them."""

import unittest
from types import SimpleNamespace

from test_vllm_connector import CHUNK, DaemonProcess, FakeEngine, fake_vllm_config

from strata_vllm.prompt_keys import key_tokens

PLACEHOLDER = 7  # the image token a processor repeats over an image's positions


def image(identifier, offset, length):
    return SimpleNamespace(modality="image", identifier=identifier,
                           mm_position=SimpleNamespace(offset=offset, length=length))


def prompt_with_image(length=4 * CHUNK, offset=CHUNK + 8, size=24):
    tokens = list(range(100, 100 + length))
    tokens[offset:offset + size] = [PLACEHOLDER] * size
    return tokens, offset, size


class KeyTokensTest(unittest.TestCase):

    def test_an_images_positions_come_from_its_hash(self):
        tokens, offset, size = prompt_with_image()
        cat = key_tokens(SimpleNamespace(prompt_token_ids=tokens,
                                         mm_features=[image("cat", offset, size)]))
        dog = key_tokens(SimpleNamespace(prompt_token_ids=tokens,
                                         mm_features=[image("dog", offset, size)]))
        again = key_tokens(SimpleNamespace(prompt_token_ids=tokens,
                                           mm_features=[image("cat", offset, size)]))
        self.assertEqual(cat, again, "the same image at the same place: the same keys")
        self.assertEqual(cat[:offset], tokens[:offset])
        self.assertEqual(cat[offset + size:], tokens[offset + size:])
        self.assertTrue(all(a != b for a, b in zip(cat[offset:offset + size],
                                                     dog[offset:offset + size])))
        self.assertTrue(all(0 <= t < 2**32 for t in cat))
        self.assertEqual(key_tokens(SimpleNamespace(prompt_token_ids=tokens)), tokens,
                         "a text prompt is its tokens")

    def test_a_prompt_the_keys_cannot_describe_has_none(self):
        tokens, offset, size = prompt_with_image()
        for features, what in (([image("", offset, size)], "no hash"),
                               ([image("cat", len(tokens) - 4, size)], "range past the end"),
                               ([SimpleNamespace(identifier="cat")], "no range")):
            with self.subTest(what):
                self.assertIsNone(key_tokens(SimpleNamespace(prompt_token_ids=tokens,
                                                             mm_features=features)))
        self.assertIsNone(key_tokens(SimpleNamespace(prompt_token_ids=tokens,
                                                     prompt_embeds=object())))


class MultimodalHitsTest(unittest.TestCase):

    def setUp(self):
        self.daemon = DaemonProcess()
        self.daemon.start()
        self.addCleanup(self.daemon.close)
        self.config = fake_vllm_config(self.daemon.socket_path)

    def test_the_same_text_with_another_image_hits_only_before_the_image(self):
        tokens, offset, size = prompt_with_image()
        FakeEngine(self.config).run("a", tokens, mm_features=[image("cat", offset, size)])
        other = FakeEngine(self.config, seed=5)
        matched, _, _ = other.run("b", tokens, mm_features=[image("dog", offset, size)])
        self.assertEqual(matched, offset // CHUNK * CHUNK, "chunks from the image on differ")
        same = FakeEngine(self.config, seed=9)
        matched, blocks, errors = same.run("c", tokens, mm_features=[image("cat", offset, size)])
        self.assertEqual((matched, errors), (len(tokens) - 1, set()))
        self.assertEqual(same.wrong_positions(tokens, blocks, 0, matched), [])

    def test_prompt_embeddings_are_neither_loaded_nor_saved(self):
        tokens = list(range(100, 100 + 4 * CHUNK))
        engine = FakeEngine(self.config)
        request = SimpleNamespace(request_id="e", prompt_token_ids=tokens, prompt_embeds=object(),
                                  cache_salt=None, lora_request=None, kv_transfer_params=None)
        self.assertEqual(engine.scheduler.get_num_new_matched_tokens(request, 0), (0, False))
        self.assertEqual(engine.scheduler.prefetch(request), 0)


if __name__ == "__main__":
    unittest.main()
