"""A fence reaches the sink in two shapes; both must read as the broker's fencing answer."""
from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError

from pipelines.fraud.sinks import fence_answer


def test_a_fence_raised_as_is_is_the_answer():
    exc = ProducerFencedError()
    assert fence_answer(exc) is exc


def test_a_fence_wrapped_by_a_later_send_is_found():
    # kafka-python: "Cannot perform send because at least one previous transactional or idempotent
    # request has failed with errors.", with the sender's last error as the second argument
    cause = InvalidProducerEpochError()
    wrapped = KafkaError("Cannot perform send because at least one previous transactional or idempotent "
                         "request has failed with errors.", cause)
    assert fence_answer(wrapped) is cause


def test_other_errors_are_not_fences():
    assert fence_answer(KafkaError("Cannot perform send", TimeoutError())) is None
    assert fence_answer(RuntimeError("broker down")) is None
