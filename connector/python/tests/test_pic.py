"""Position-independent chunks from Python: strata_vllm.pic's params and PicPlanner over
strata_connector.PicConnector, against the real daemon in another process with a device pool
(connector_test_daemon, path in $STRATA_TEST_DAEMON), and the vLLM connector's fallback for
requests that ask for chunks."""

import ctypes
import logging
import unittest

import strata_connector
from strata_vllm import MalformedPicParams, PicParams, PicPlanner, pic_params
from test_vllm_connector import DIM, HEADS, LAYERS, DaemonProcess, FakeEngine, fake_vllm_config

PAGE_TOKENS = 16  # the test daemon's device pool pages
POOL_PAGES = 8
PAD = 7
SEPARATOR = [999, 998]


def options(socket_path, engine_id):
    o = strata_connector.ConnectorOptions()
    o.socket_path = socket_path
    o.engine_id = engine_id
    o.model_id = "fake/model"
    o.num_layers, o.num_kv_heads, o.head_dim, o.dtype = LAYERS, HEADS, DIM, "bf16"
    o.chunk_tokens = PAGE_TOKENS
    o.block_size = PAGE_TOKENS
    o.io_timeout_ms = 2000
    o.reconnect_min_backoff_ms, o.reconnect_max_backoff_ms = 10, 20
    o.device_backend = "host"
    return o


def page_addresses(pool, page):
    return [pool["base"] + layer * pool["layer_stride_bytes"] + page * pool["page_bytes"]
            for layer in range(pool["num_layers"])]


def fill(pool, pages, value):
    for page in pages:
        for address in page_addresses(pool, page):
            ctypes.memset(address, value, pool["page_bytes"])


def holds(pool, pages, value):
    for page in pages:
        for address in page_addresses(pool, page):
            if ctypes.string_at(address, pool["page_bytes"]) != bytes([value]) * pool["page_bytes"]:
                return False
    return True


class PicParamsTest(unittest.TestCase):

    def test_requests_without_chunks_have_none(self):
        for params in (None, {}, {"do_remote_decode": True}, "not a dict"):
            self.assertIsNone(pic_params(params))

    def test_chunks_or_a_separator_with_a_policy(self):
        self.assertEqual(pic_params({"strata_pic": {"chunks": [[4, 20], (30, 40)]}}),
                         PicParams(chunks=((4, 20), (30, 40))))
        self.assertEqual(
            pic_params({"strata_pic": {"separator": [9, 9], "recompute": "cacheblend",
                                       "check_layer": 0, "blend_ratio": 1, "tenant": "t"}}),
            PicParams(separator=(9, 9), recompute="cacheblend", check_layer=0, blend_ratio=1.0,
                      tenant="t"))

    def test_malformed_params_name_what_is_wrong(self):
        bad = {
            "not a dict": ["chunks"],
            "exactly one": {},
            "exactly one of": {"chunks": [], "separator": [1]},
            "unknown": {"chunks": [], "chunk_size": 3},
            "not [begin, end]": {"chunks": [[1, 2, 3]]},
            "not [begin, end] ": {"chunks": [[-1, 2]]},
            "not a list of [begin": {"chunks": 5},
            "separator is empty": {"separator": []},
            "not a list of token ids": {"separator": [1, "x"]},
            "recompute": {"chunks": [], "recompute": "blend"},
            "legolink_tokens": {"chunks": [], "legolink_tokens": True},
            "blend_ratio": {"chunks": [], "blend_ratio": 1.5},
            "tenant": {"chunks": [], "tenant": 3},
        }
        for what, params in bad.items():
            with self.assertRaises(MalformedPicParams, msg=what) as raised:
                pic_params({"strata_pic": params})
            self.assertIn(what.strip(), str(raised.exception))


class PicPlannerTest(unittest.TestCase):

    def setUp(self):
        self.daemon = DaemonProcess(device_pool_bytes=POOL_PAGES * LAYERS * 1024)
        self.daemon.start()

    def tearDown(self):
        self.daemon.close()

    def planner(self, engine_id):
        return PicPlanner(options(self.daemon.socket_path, engine_id), pad_token=PAD)

    def test_a_chunk_written_by_one_engine_is_read_in_place_by_another(self):
        a, b, question = list(range(1000, 1040)), list(range(2000, 2016)), [5, 6, 7]
        writer = self.planner("writer")
        first = a + SEPARATOR + b + SEPARATOR + question
        plan = writer.begin("r1", first, {"strata_pic": {"separator": SEPARATOR}})
        self.assertEqual([c["state"] for c in plan["chunks"]], ["write", "write"])
        self.assertEqual([c["source"] for c in plan["chunks"]], [(0, 40), (42, 58)])
        self.assertEqual(plan["chunks"][0]["padded"], (0, 48))  # 8 leading pads
        self.assertEqual(plan["padded_tokens"][:8], [PAD] * 8)
        pool = plan["pool"]
        self.assertEqual(pool["block_tokens"], PAGE_TOKENS)
        # The options' layout is rope_applied (the default): keys rotated at canonical positions.
        self.assertIs(pool["keys_rotated"], True)
        fill(pool, plan["chunks"][0]["pool_pages"], 0xA1)
        fill(pool, plan["chunks"][1]["pool_pages"], 0xB2)
        published = writer.publish("r1")
        self.assertEqual([c["state"] for c in published["chunks"]], ["shared", "shared"])

        reader = self.planner("reader")
        second = list(range(3000, 3009)) + b + a + question
        plan = reader.begin("r2", second, {"strata_pic": {"chunks": [[9, 25], [25, 65]]}})
        self.assertEqual([c["state"] for c in plan["chunks"]], ["shared", "shared"])
        self.assertEqual(plan["chunks"][0]["pool_pages"], published["chunks"][1]["pool_pages"])
        self.assertEqual(plan["chunks"][1]["pool_pages"], published["chunks"][0]["pool_pages"])
        self.assertTrue(holds(plan["pool"], plan["chunks"][1]["pool_pages"], 0xA1))
        # The prompt and its pads, block 1 of each chunk, then the question.
        self.assertEqual(plan["recompute_from_layer_zero"], [(0, 48), (80, 83)])
        self.assertEqual(plan["recomputed_tokens"], 51)
        # Blocks: prompt, b, a's three, question; a's last two are copies filled from a's pages
        # (re-rotated: the pool holds rotated keys), the rest computed whole.
        a_pages = published["chunks"][0]["pool_pages"]
        self.assertEqual(plan["own_blocks"], 6)
        self.assertEqual(
            [(b["pool"], b["index"], b["fill_from_page"]) for b in plan["block_table"]],
            [(False, 0, None), (False, 1, None), (False, 2, None), (False, 3, a_pages[1]),
             (False, 4, a_pages[2]), (False, 5, None)])
        self.assertEqual([b["position"] for b in plan["block_table"]], [0, 16, 32, 48, 64, 80])
        self.assertEqual(plan["chunks"][1]["pool_page_positions"], [], "a whole chunk")
        # What the reader's attention measured of a's tokens reaches the daemon; a report of
        # another length does not.
        reader.report_importance("r2", 1, [0.5] * 48)
        with self.assertRaises(ValueError):
            reader.report_importance("r2", 1, [0.5] * 47)
        self.assertTrue(reader.verify("r2"))
        reader.end("r2")
        writer.end("r1")
        self.assertEqual(reader.connector.open_requests + writer.connector.open_requests, 0)
        with self.assertRaises(strata_connector.StrataError):
            reader.end("r2")

    def test_a_pending_chunk_is_shared_once_its_writer_publishes(self):
        writer, waiter = self.planner("writer"), self.planner("waiter")
        prompt = list(range(1000, 1040))
        params = {"strata_pic": {"chunks": [[0, 32]]}}
        written = writer.begin("w", prompt, params)
        self.assertEqual(written["chunks"][0]["state"], "write")
        waiting = waiter.begin("p", prompt, params)
        self.assertEqual(waiting["chunks"][0]["state"], "pending")
        self.assertEqual(waiter.refresh("p")["chunks"][0]["state"], "pending")
        writer.publish("w")
        shared = waiter.refresh("p")
        self.assertEqual(shared["chunks"][0]["state"], "shared")
        self.assertEqual(shared["chunks"][0]["pool_pages"], written["chunks"][0]["pool_pages"])
        writer.end("w")
        waiter.end("p")

    def test_bad_requests_fall_back_to_prefix_caching(self):
        planner = self.planner("engine")
        prompt = list(range(100, 164))
        self.assertIsNone(planner.begin("none", prompt, None))
        with self.assertLogs("strata_vllm", level="WARNING") as logs:
            self.assertIsNone(planner.begin("malformed", prompt, {"strata_pic": {}}))
            self.assertIsNone(planner.begin(
                "overlapping", prompt, {"strata_pic": {"chunks": [[0, 30], [20, 40]]}}))
            self.assertIsNone(planner.begin(
                "past the prompt", prompt, {"strata_pic": {"chunks": [[40, 80]]}}))
            self.assertIsNone(planner.begin(
                "k = 0", prompt, {"strata_pic": {"chunks": [[0, 32]], "recompute": "legolink",
                                                 "legolink_tokens": 0}}))
        self.assertEqual(len(logs.records), 4)
        self.assertTrue(all("falls back to prefix caching" in r.getMessage()
                            for r in logs.records))
        self.assertEqual(planner.connector.open_requests, 0)

    def test_without_a_daemon_every_chunk_is_private(self):
        planner = PicPlanner(options(self.daemon.socket_path + ".absent", "engine"), PAD)
        plan = planner.begin("r", list(range(100, 170)), {"strata_pic": {"chunks": [[10, 42]]}})
        self.assertEqual([c["state"] for c in plan["chunks"]], ["private"])
        self.assertTrue(plan["chunks"][0]["why_private"])
        self.assertIsNone(plan["pool"])
        self.assertEqual(plan["recomputed_tokens"], len(plan["padded_tokens"]))
        planner.end("r")


class VllmConnectorPicFallbackTest(unittest.TestCase):

    def setUp(self):
        self.daemon = DaemonProcess()
        self.daemon.start()

    def tearDown(self):
        self.daemon.close()

    def test_requests_asking_for_chunks_are_served_by_prefix_caching(self):
        config = fake_vllm_config(self.daemon.socket_path)
        prompt = list(range(100, 170))
        FakeEngine(config).run("a", prompt)
        engine = FakeEngine(config, seed=5)
        params = {"strata_pic": {"chunks": [[16, 48]]}}
        with self.assertLogs("strata_vllm", level="WARNING") as logs:
            matched, blocks, errors = engine.run("b", prompt, kv_transfer_params=params)
            again, _, _ = engine.run("c", prompt, kv_transfer_params=params)
        self.assertEqual((matched, again, errors), (64, 64, set()))
        self.assertEqual(engine.wrong_positions(prompt, blocks, 0, 70), [])
        self.assertEqual(len([r for r in logs.records if "position-independent" in r.getMessage()]),
                         1, "said once")


if __name__ == "__main__":
    logging.basicConfig()
    unittest.main()
